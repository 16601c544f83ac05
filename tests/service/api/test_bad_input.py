"""Bad input gets a 4xx with a clear JSON error and writes nothing (real uvicorn server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.settings import Settings

GOOD = {"text": "fine"}


def stored_state(settings: Settings) -> tuple[int, list[Path]]:
    import sqlite3

    with sqlite3.connect(settings.catalog_path) as db:
        rows = db.execute("SELECT COUNT(*) FROM entry_versions").fetchone()[0]
    blobs = [p for p in (settings.data_dir / "blobs").rglob("*") if p.is_file()]
    return rows, blobs


def assert_error(response: httpx.Response, status: int | tuple[int, ...], *words: str) -> None:
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, response.text
    error = response.json()["error"]
    assert error["code"] and error["message"]
    for word in words:
        assert word in error["message"], error["message"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"samples": [GOOD], "backend": "cuda-magic"}, 422, ("unknown backend",)),
        ({"samples": [GOOD], "backend": "fla"}, 409, ("fla",)),
        ({"samples": [GOOD], "featureset": {"layers": [8]}}, 422, ("out of range",)),
        ({"samples": [GOOD], "featureset": {"layers": [-1]}}, 422, ("negative",)),
        ({"samples": [GOOD], "featureset": {"layers": []}}, 422, ("layers",)),
        ({"samples": [GOOD], "featureset": {"layers": [1], "dtype": "float8"}}, 422, ("dtype",)),
        ({"samples": [GOOD, {"text": ""}]}, 422, ("samples[1]",)),
        ({"samples": [GOOD, {"messages": []}]}, 422, ("samples[1]",)),
        ({"samples": [{"token_ids": [1, 99999]}]}, 422, ("vocabulary",)),
        ({"samples": [{"text": 5}]}, 422, ("samples[0]",)),
        ({"samples": [{"text": "a", "unknown": 1}]}, 422, ("unknown",)),
        ({"samples": "nope"}, 422, ()),
        ({"samples": []}, 422, ()),
        ({}, 422, ("samples",)),
        ({"samples": [GOOD], "force": "yes please"}, 422, ()),
        ({"samples": [{"text": "x " * 40000}]}, 413, ("tokens",)),
    ],
)
def test_bad_extract_requests(http: httpx.Client, settings: Settings, body: dict, status: int, words: tuple) -> None:
    before = stored_state(settings)
    assert_error(http.post("/v1/extract", json=body), status, *words)
    assert stored_state(settings) == before


def test_ten_megabyte_prompt_is_refused_before_parsing(http: httpx.Client, settings: Settings) -> None:
    before = stored_state(settings)
    assert_error(http.post("/v1/extract", json={"samples": [{"text": "x" * (10 * 1024 * 1024)}]}), 413, "limit")
    chunked = http.post(
        "/v1/extract",
        content=iter([b'{"samples": [{"text": "', b"y" * (5 * 1024 * 1024), b'"}]}']),
        headers={"content-type": "application/json"},
    )
    assert_error(chunked, 413)
    assert stored_state(settings) == before


def test_malformed_json_and_wrong_content(http: httpx.Client) -> None:
    assert_error(http.post("/v1/extract", content=b"{not json", headers={"content-type": "application/json"}), 422)
    assert_error(http.post("/v1/extract", content=b"\xff\xfe", headers={"content-type": "application/json"}), 422)


@pytest.mark.parametrize(
    ("path", "params", "status"),
    [
        ("/v1/features/XYZ", {}, 422),
        ("/v1/features/" + "A" * 64, {}, 422),
        ("/v1/features/" + "a" * 63, {}, 422),
        ("/v1/features/" + "a" * 64, {"backend": "gpu"}, 422),
        ("/v1/features/" + "a" * 64, {"content_hash": "md5:abc"}, 422),
        ("/v1/features/" + "a" * 64, {"model_revision": "latest"}, 422),
        ("/v1/features/" + "a" * 64, {"featureset": "default"}, 422),
        ("/v1/features/" + "a" * 64, {"layers": "one"}, 422),
        ("/v1/features/" + "a" * 64, {"tokens": "5"}, 422),
        ("/v1/features/" + "a" * 64, {"tokens": "-1:4"}, 422),
        ("/v1/features/" + "a" * 64, {}, 404),
        ("/v1/entries", {"limit": 0}, 422),
        ("/v1/entries", {"limit": "many"}, 422),
        ("/v1/entries", {"since": "yesterday"}, 422),
        ("/v1/entries", {"cursor": "abc"}, 422),
        ("/v1/entries", {"prompt_hash": "zz"}, 422),
        ("/v1/nothing-here", {}, 404),
    ],
)
def test_bad_reads(http: httpx.Client, path: str, params: dict, status: int) -> None:
    assert_error(http.get(path, params=params), status)


def test_layer_out_of_the_entry_and_bad_token_range(http: httpx.Client) -> None:
    result = http.post("/v1/extract", json={"samples": [GOOD]}).json()["results"][0]
    url = f"/v1/features/{result['prompt_hash']}"
    n = result["manifest"]["num_tokens"]
    assert_error(http.get(url, params={"layers": "7"}), 404, "not in this entry")  # no such part
    once = http.get(url, params={"layers": "1"})
    assert once.status_code == 200 and http.get(url, params={"layers": "1,1"}).content == once.content  # read once
    assert_error(http.get(url, params={"tokens": f"{n}:{n + 5}"}), 422, "tokens")  # nothing left after clipping
    assert_error(http.get(url, params={"tokens": "3:3"}), 422, "tokens")
    assert http.get(url, params={"layers": "1", "tokens": f"0:{n}"}).status_code == 200


def test_wrong_method(http: httpx.Client) -> None:
    response = http.delete("/v1/extract")
    assert_error(response, 405)
    assert response.headers["allow"] == "POST"
