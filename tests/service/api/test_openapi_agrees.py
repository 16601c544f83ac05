"""The OpenAPI document says what the validation says (the schemathesis run of #24 found where they differed): a
path's 405 names every method the path serves, every body operation declares its 400, the app's own limits (the
model's vocabulary, the window margin) are in its document, and a JSON integer or boolean means just that."""

from __future__ import annotations

import httpx

from service.settings import Settings
from tests.service.api.test_bad_input import assert_error


def test_a_405_names_every_method_its_path_serves(http: httpx.Client) -> None:
    response = http.request("OPTIONS", "/v1/jobs/0123456789")
    assert_error(response, 405)
    assert response.headers["allow"] == "GET"


def test_the_document_carries_the_apps_limits_and_every_bodys_400(http: httpx.Client, settings: Settings) -> None:
    document = http.get("/openapi.json").json()
    with_body = [op for ops in document["paths"].values() for op in ops.values() if "requestBody" in op]
    assert len(with_body) >= 9 and all("400" in op["responses"] for op in with_body)
    assert document["paths"]["/v1/entries:import"]["post"]["requestBody"]["required"]
    assert document["paths"]["/v1/jobs"]["post"]["requestBody"]["required"]
    minutes = document["components"]["schemas"]["WindowOpenRequest"]["properties"]["minutes"]
    assert minutes["exclusiveMinimum"] == settings.window_margin_s / 60
    vocab = http.get("/v1/info").json()["model"]["vocab_size"]
    sample = document["components"]["schemas"]["ExtractRequest"]["properties"]["samples"]["items"]
    assert sample["properties"]["token_ids"]["anyOf"][0]["items"]["maximum"] == vocab - 1
    assert len(sample["oneOf"]) == 3  # exactly one prompt form


def test_json_integers_and_booleans_are_what_they_say(http: httpx.Client) -> None:
    assert_error(http.post("/v1/audit", json={"sample": 1, "seed": False}), 422, "seed")
    assert_error(http.post("/v1/extract", json={"samples": [{"text": "x"}], "force": 0}), 422, "force")
    # 2.0 is an integer to JSON Schema, and so here (the store is empty: nothing to audit)
    assert http.post("/v1/audit", json={"sample": 2.0}).status_code == 200
