"""Extract, fetch, slice, pin and list through a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest
import torch

from client import AmbiguousError, FeatureClient, NotFoundError
from schemas import safetensors_body
from schemas.featureset import FeatureSet
from schemas.prompt_hash import prompt_hash
from tests.conftest import coding_prompts


def test_extract_then_fetch_round_trip(client: FeatureClient) -> None:
    samples = coding_prompts()
    response = client.extract(samples)
    assert response.extracted == 10 and response.existing == 0
    for sample, result in zip(samples, response.results, strict=True):
        assert result.prompt_hash == prompt_hash(sample) and result.sample_id == sample["id"]
        features = client.get(sample)
        assert features.content_hash == result.manifest.content_hash
        assert features.hidden_states.dtype == torch.bfloat16
        assert list(features.hidden_states.shape) == [result.manifest.num_tokens, 5, 64]
        assert features.input_ids.dtype == torch.int32
    again = client.extract(samples)
    assert again.extracted == 0 and again.existing == 10
    assert [r.manifest.content_hash for r in again.results] == [r.manifest.content_hash for r in response.results]


def test_manifest_has_layer_stats_and_fingerprint(client: FeatureClient) -> None:
    m = client.extract([{"text": "stats please"}]).results[0].manifest
    assert [s.layer for s in m.layer_stats] == [1, 2, 3, 4, 5]
    assert all(s.std > 0 and s.absmax > 0 for s in m.layer_stats)
    assert m.fingerprint.transformers and m.fingerprint.torch and m.sample == {"text": "stats please"}


def test_layer_and_token_slices(client: FeatureClient) -> None:
    sample = {"text": "def graph_bfs(graph, start, goal): " * 20}
    client.extract([sample])
    full = client.get(sample)
    part = client.get(sample, layers=[2, 5], tokens=(10, 50))
    assert part.layers == [2, 5] and part.tokens == (10, 50) and not part.full
    assert torch.equal(part.hidden_states, full.hidden_states[10:50][:, [1, 4]])
    assert torch.equal(part.input_ids, full.input_ids[10:50])
    tail = client.get(sample, tokens=(full.manifest.num_tokens - 3, None))
    assert tail.hidden_states.shape[0] == 3


def test_versions_are_pinned_by_content_hash(client: FeatureClient, http: httpx.Client) -> None:
    sample = {"text": "pin me"}
    m = client.extract([sample]).results[0].manifest
    assert client.get(sample, content_hash=m.content_hash).content_hash == m.content_hash
    with pytest.raises(NotFoundError):
        client.get(sample, content_hash="sha256:" + "0" * 64)
    forced = client.extract([sample], force=True).results[0]
    assert forced.status == "existing"  # same bits: no new version
    assert len(list(client.entries(prompt_hash=m.prompt_hash))) == 1


def test_head_and_exists(client: FeatureClient, http: httpx.Client) -> None:
    sample = {"text": "head"}
    assert not client.exists(sample)
    m = client.extract([sample]).results[0].manifest
    assert client.exists(sample)
    head = http.head(f"/v1/features/{m.prompt_hash}")
    assert head.status_code == 200 and head.headers["x-hsstore-content-hash"] == m.content_hash
    assert http.head(f"/v1/features/{'f' * 64}").status_code == 404


def test_get_body_is_safetensors_with_manifest_metadata(client: FeatureClient, http: httpx.Client) -> None:
    m = client.extract([{"text": "wire"}]).results[0].manifest
    response = http.get(f"/v1/features/{m.prompt_hash}")
    assert response.headers["content-type"] == "application/octet-stream"
    decoded = safetensors_body.decode(response.content)
    assert '"content_hash"' in decoded.metadata["manifest"]
    assert set(decoded.tensors) == {"hidden_states", "input_ids"}


def test_omitted_key_parts_must_be_unambiguous(client: FeatureClient) -> None:
    sample = {"text": "two featuresets"}
    client.extract([sample], featureset=FeatureSet(layers=[1]))
    client.extract([sample], featureset=FeatureSet(layers=[2]))
    with pytest.raises(AmbiguousError, match="featureset"):
        client.get(sample)
    assert client.get(sample, featureset=FeatureSet(layers=[2])).layers == [2]


def test_wrong_backend_is_impossible_to_miss(client: FeatureClient) -> None:
    sample = {"text": "which backend"}
    client.extract([sample])
    with pytest.raises(NotFoundError, match="stored: backend=torch"):
        client.get(sample, backend="fla")


def test_entries_pagination_and_filters(client: FeatureClient, http: httpx.Client) -> None:
    client.extract([{"text": f"entry {i}"} for i in range(7)])
    listed = list(client.entries(page_size=3))
    assert len(listed) == 7 and len({m.prompt_hash for m in listed}) == 7
    page = http.get("/v1/entries", params={"limit": 3}).json()
    assert len(page["entries"]) == 3 and page["next_cursor"]
    assert list(client.entries(backend="fla")) == []
    assert len(list(client.entries(since="2000-01-01"))) == 7
    assert list(client.entries(since="2999-01-01T00:00:00Z")) == []


def test_health_and_readiness(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    info = http.get("/v1/info").json()
    assert info["model"]["architecture"] == "Qwen3_5ForCausalLM"
    assert info["backends_available"] == ["torch"] and info["default_backend"] == "torch"
