"""Every input that once answered a bare `text/plain` 500 and reset the keep-alive connection: now bad input is a
4xx in the envelope before any work, a fault is a specific JSON 5xx, and the connection keeps serving."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from service.settings import Settings
from tests.conftest import LiveServer

GOOD = {"text": "def f(): return 1"}


class Counted:
    """One httpx client against a live server that counts the TCP connections it opened."""

    def __init__(self, url: str) -> None:
        self.opened = 0
        self.http = httpx.Client(base_url=url, timeout=60)

    def request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        def trace(name: str, _: dict) -> None:
            if name == "connection.connect_tcp.complete":
                self.opened += 1

        return self.http.request(method, path, extensions={"trace": trace}, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def counted(app: FastAPI) -> Iterator[Counted]:
    with LiveServer(app) as url:
        client = Counted(url)
        yield client
        client.http.close()


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def stored_files(settings: Settings) -> list[Path]:
    return [
        p for folder in ("blobs", "manifests", "tmp") for p in (settings.data_dir / folder).rglob("*") if p.is_file()
    ]


@pytest.mark.parametrize(
    "since", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "9999-12-31T23:59:59.999999-00:01", "1e400"]
)
def test_since_at_the_ends_of_the_date_range(counted: Counted, since: str) -> None:
    assert_envelope(counted.request("GET", "/v1/entries", params={"since": since}), 422, "invalid_request")
    assert counted.request("GET", "/healthz").status_code == 200 and counted.opened == 1


@pytest.mark.parametrize("cursor", [str(2**63 + 5), "9" * 40, "-1", "1.5", "²", "٣"])  # not ASCII digits either
def test_cursors_past_what_a_catalog_counts(counted: Counted, cursor: str) -> None:
    assert_envelope(counted.request("GET", "/v1/entries", params={"cursor": cursor}), 422, "invalid_request")
    assert counted.request("GET", "/healthz").status_code == 200 and counted.opened == 1


def test_a_jsonl_line_nested_beyond_reason(counted: Counted) -> None:
    upload = ("[" * 100_000 + "]" * 100_000).encode()
    response = counted.request("POST", "/v1/jobs", content=upload, headers={"content-type": "application/x-ndjson"})
    assert "deeper than the limit of 64 levels" in assert_envelope(response, 422, "invalid_request")["message"]
    body = '{"samples": [' + "[" * 5000 + "]" * 5000 + "]}"
    response = counted.request("POST", "/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert_envelope(response, 422, "invalid_request")
    assert counted.request("GET", "/healthz").status_code == 200 and counted.opened == 1


@pytest.mark.parametrize(
    "sample",
    [
        '{"id": "\\udfff", "text": "hi"}',
        '{"text": "hi \\ud83d"}',
        '{"messages": [{"role": "user", "content": "\\ud83d"}]}',
        '{"text": "a", "completion": {"text": "\\udc00"}}',
    ],
)
def test_lone_surrogates_are_refused_before_any_work(counted: Counted, settings: Settings, sample: str) -> None:
    body = '{"samples": [' + sample + "]}"
    response = counted.request("POST", "/v1/extract", content=body, headers={"content-type": "application/json"})
    assert "surrogate" in assert_envelope(response, 422, "invalid_sample")["message"]
    assert stored_files(settings) == []  # refused before the forward: no orphan blob
    assert counted.request("GET", "/v1/entries").json()["entries"] == []
    assert counted.opened == 1


def test_a_full_disk_is_507_and_publishes_nothing(
    counted: Counted, app: FastAPI, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = app.state.services.store

    def full(*_: object) -> bool:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "put_if_absent", full)
    error = assert_envelope(counted.request("POST", "/v1/extract", json={"samples": [GOOD]}), 507, "storage_full")
    assert str(settings.data_dir) not in error["message"]
    assert counted.request("GET", "/v1/entries").json()["entries"] == [] and stored_files(settings) == []
    monkeypatch.undo()
    assert counted.request("POST", "/v1/extract", json={"samples": [GOOD]}).status_code == 200  # room again
    assert counted.opened == 1


def test_a_disk_that_fills_after_the_blob_leaves_no_orphan(
    counted: Counted, app: FastAPI, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(app.state.services.store, "put_manifest", full)  # the blob is published, its document is not
    assert_envelope(counted.request("POST", "/v1/extract", json={"samples": [GOOD]}), 507, "storage_full")
    assert stored_files(settings) == [] and counted.request("GET", "/v1/entries").json()["entries"] == []


@pytest.mark.parametrize(
    "damage",
    ["delete the shard", "truncate the shard", "delete the array's zarr.json", "truncate the array's zarr.json"],
)
def test_damaged_files_are_corrupt_entry_without_server_paths(
    counted: Counted, settings: Settings, damage: str
) -> None:
    manifest = counted.request("POST", "/v1/extract", json={"samples": [GOOD]}).json()["results"][0]["manifest"]
    digest = manifest["content_hash"].removeprefix("sha256:")
    blob = settings.data_dir / "blobs" / digest[:2] / digest
    shard = next(p for p in (blob / "hidden_states").rglob("*") if p.is_file() and p.name != "zarr.json")
    target = {
        "delete the shard": shard,
        "truncate the shard": shard,
        "delete the array's zarr.json": blob / "hidden_states" / "zarr.json",
        "truncate the array's zarr.json": blob / "hidden_states" / "zarr.json",
    }[damage]
    if damage.startswith("delete"):
        target.unlink()
    else:
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    for params in ({}, {"layers": "1"}, {"tokens": "0:2"}):
        response = counted.request("GET", f"/v1/features/{manifest['prompt_hash']}", params=params)
        error = assert_envelope(response, 500, "corrupt_entry")
        assert str(settings.data_dir) not in error["message"] and "/" not in error["message"].split(":", 1)[-1]
    assert counted.request("GET", "/healthz").status_code == 200 and counted.opened == 1


def test_an_invalid_json_body_is_the_envelope(counted: Counted) -> None:
    for body in (b"{", b"\xff\xfe", json.dumps({"samples": [GOOD]})[:-1].encode()):
        response = counted.request("POST", "/v1/extract", content=body, headers={"content-type": "application/json"})
        assert_envelope(response, 422, "invalid_request")
    assert counted.opened == 1
