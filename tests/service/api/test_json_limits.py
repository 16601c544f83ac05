"""The JSON limits (schemas/json_limits.py, docs/design.md "Limits") hold on every body the API takes, each refused
with a 4xx in the envelope naming the limit, nothing written: a body nested past 72 levels on every route, a sample
past 64 levels or holding an integer past 64 bits, a JSONL upload's line, an import's metadata, and a number of more
digits than Python's parser converts. A sample at the limit itself is taken."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from schemas import safetensors_body
from schemas.api import IMPORT_METADATA
from schemas.json_limits import BODY_DEPTH, SAMPLE_LIMITS
from service.api.bounded_json import BoundedJsonRoute
from service.api.routes import ROUTERS
from service.settings import Settings
from tests.service.api.test_bad_input import assert_error, stored_state


def _nested(depth: int, kind: str = "object") -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value] if kind == "array" else {"a": value}
    return value


def _routes(app: FastAPI) -> list[APIRoute]:
    """The API's routes (its routers', as the app includes them) and the app's own (the docs, the status page)."""
    return [r for source in (*ROUTERS, app) for r in source.routes if isinstance(r, APIRoute)]


def _takes_json(route: APIRoute) -> bool:
    """A route with a JSON body: a body parameter, or a body it reads itself that its document says is JSON."""
    documented = (route.openapi_extra or {}).get("requestBody", {}).get("content", {})
    return route.body_field is not None or "application/json" in documented


def _post_routes(app: FastAPI) -> list[str]:
    """Every route that takes a JSON body, its path parameters filled in."""
    paths = []
    for route in _routes(app):
        if _takes_json(route):
            path = route.path
            for name in route.param_convertors:
                path = path.replace("{" + name + "}", "a" * 64)
            paths.append(path)
    return sorted(paths)


def test_every_route_that_takes_a_body_parses_it_through_the_bounded_loader(app: FastAPI) -> None:
    takes_bodies = [r for r in _routes(app) if r.methods & {"POST", "PUT", "PATCH"}]
    assert len(takes_bodies) >= 10
    assert all(isinstance(r, BoundedJsonRoute) for r in takes_bodies), [
        r.path for r in takes_bodies if not isinstance(r, BoundedJsonRoute)
    ]
    assert all(isinstance(r, BoundedJsonRoute) for router in ROUTERS for r in router.routes)


@pytest.mark.parametrize("kind", ["object", "array"])
def test_a_body_past_the_depth_limit_is_a_422_on_every_route(
    app: FastAPI, http: httpx.Client, settings: Settings, kind: str
) -> None:
    before = stored_state(settings)
    routes = _post_routes(app)
    assert "/v1/extract" in routes and "/v1/jobs" in routes and "/v1/datasets" in routes
    for depth in (BODY_DEPTH + 1, 900, 100_000):  # past the limit; near, and far past, Python's own recursion limit
        raw = "[" * depth + "]" * depth if kind == "array" else '{"a":' * depth + "1" + "}" * depth
        for path in routes:
            response = http.post(path, content=raw, headers={"content-type": "application/json"})
            assert_error(response, 422, f"the limit of {BODY_DEPTH} levels")
    assert stored_state(settings) == before


def test_a_sample_at_the_depth_limit_is_taken_and_one_past_it_is_refused(http: httpx.Client) -> None:
    chat = [{"role": "user", "content": "hi"}]
    at_limit = {"messages": chat, "chat_template_kwargs": _nested(SAMPLE_LIMITS.depth - 1)}  # 64 levels in all
    assert http.post("/v1/extract", json={"samples": [at_limit]}).status_code == 200
    past = {"messages": chat, "chat_template_kwargs": _nested(SAMPLE_LIMITS.depth)}
    response = http.post("/v1/extract", json={"samples": [past]})
    assert_error(response, 422, "samples[0]", f"the limit of {SAMPLE_LIMITS.depth} levels")
    assert response.json()["error"]["code"] == "invalid_sample"


@pytest.mark.parametrize(
    ("sample", "words"),
    [
        ({"text": "x", "completion": {"token_ids": [2**64]}}, ("integer outside",)),
        ({"messages": [{"role": "user", "content": "x", "weight": [float("inf")]}]}, ("not a JSON number",)),
        ({"messages": [{"role": "user", "content": "x", "n": list(range(SAMPLE_LIMITS.members + 1))}]}, ("members",)),
    ],
)
def test_a_sample_past_a_value_limit_is_refused_naming_it(
    http: httpx.Client, settings: Settings, sample: dict, words: tuple
) -> None:
    before = stored_state(settings)
    body = json.dumps({"samples": [sample]})
    response = http.post("/v1/extract", content=body, headers={"content-type": "application/json"})
    assert_error(response, (413, 422), *(() if response.status_code == 413 else words))
    assert stored_state(settings) == before


def test_an_integer_of_more_digits_than_the_parser_converts_is_a_422(http: httpx.Client) -> None:
    raw = '{"samples": [{"text": "x", "completion": {"token_ids": [' + "9" * 5000 + "]}}]}"
    assert_error(http.post("/v1/extract", content=raw, headers={"content-type": "application/json"}), 422, "digits")


def test_a_jsonl_line_past_the_depth_limit_names_its_line(http: httpx.Client, settings: Settings) -> None:
    before = stored_state(settings)
    deep = json.dumps({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": _nested(900)})
    upload = json.dumps({"text": "fine"}) + "\n" + deep + "\n"
    response = http.post("/v1/jobs", content=upload, headers={"content-type": "application/x-ndjson"})
    assert_error(response, 422, "line 2", f"the limit of {SAMPLE_LIMITS.depth} levels")
    assert stored_state(settings) == before


def test_an_import_whose_metadata_is_too_deep_is_a_422(http: httpx.Client, settings: Settings) -> None:
    before = stored_state(settings)
    metadata = {IMPORT_METADATA: '{"sample": ' + "[" * 5000 + "]" * 5000 + "}"}
    body = safetensors_body.encode([], metadata)
    response = http.post("/v1/entries:import", content=body, headers={"content-type": "application/octet-stream"})
    assert_error(response, 422, "metadata", f"the limit of {BODY_DEPTH} levels")
    assert stored_state(settings) == before
