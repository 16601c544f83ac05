"""The batch endpoint refuses what a single GET refuses, and is bounded in keys and in bytes."""

from __future__ import annotations

import httpx
import pytest

from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer


@pytest.fixture
def prompt_hash(http: httpx.Client) -> str:
    response = http.post("/v1/extract", json={"samples": [{"text": "batch me"}], "featureset": {"layers": [1, 2]}})
    return response.json()["results"][0]["prompt_hash"]


@pytest.mark.parametrize(
    ("layers", "words", "status"),
    [
        (["1"], "layers", 422),
        ([1.5], "layers", 422),
        ([True], "layers", 422),
        ([], "layers", 422),
        ([1] * 100_000, "layers", 422),
        ([7], "not in this entry", 404),  # no such part
    ],
)
def test_batch_layers_are_checked_as_get_checks_them(
    http: httpx.Client, prompt_hash: str, layers: list, words: str, status: int
) -> None:
    response = http.post("/v1/features:batch", json={"keys": [{"prompt_hash": prompt_hash, "layers": layers}]})
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]


def test_a_layer_as_json_has_it_is_read_once(http: httpx.Client, prompt_hash: str) -> None:
    """1.0 is the integer 1 to JSON Schema and so here; a layer named twice is read once."""
    bodies = [
        http.post("/v1/features:batch", json={"keys": [{"prompt_hash": prompt_hash, "layers": layers}]})
        for layers in ([1], [1.0], [1, 1])
    ]
    assert all(b.status_code == 200 for b in bodies) and len({b.content for b in bodies}) == 1


def test_a_repeated_key_is_refused(http: httpx.Client, prompt_hash: str) -> None:
    keys = [{"prompt_hash": prompt_hash, "tokens": "0:2"}] * 3
    response = http.post("/v1/features:batch", json={"keys": keys})
    assert response.status_code == 422 and "keys[1] repeats keys[0]" in response.json()["error"]["message"]
    one_each = [{"prompt_hash": prompt_hash, "tokens": f"0:{n}"} for n in (1, 2, 3)]
    assert http.post("/v1/features:batch", json={"keys": one_each}).status_code == 200


def test_keys_and_bytes_per_batch_are_bounded(settings: Settings, tiny_loaded: LoadedModel) -> None:
    limited = settings.model_copy(update={"max_batch_keys": 2, "max_batch_bytes": 20_000})
    with LiveServer(create_app(limited, tiny_loaded)) as url, httpx.Client(base_url=url) as http:
        results = http.post("/v1/extract", json={"samples": [{"text": f"s{i} " * 40} for i in range(3)]}).json()
        keys = [{"prompt_hash": r["prompt_hash"]} for r in results["results"]]
        too_many = http.post("/v1/features:batch", json={"keys": keys})
        assert too_many.status_code == 413 and "at most 2" in too_many.json()["error"]["message"]
        too_big = http.post("/v1/features:batch", json={"keys": keys[:2]})
        assert too_big.status_code == 413 and "20,000" in too_big.json()["error"]["message"]
        sliced = [{**key, "tokens": "0:1"} for key in keys[:2]]
        assert http.post("/v1/features:batch", json={"keys": sliced}).status_code == 200
