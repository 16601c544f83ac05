from __future__ import annotations

import httpx
import pytest

from client import BackendUnavailableError, FeatureClient, NotFoundError
from schemas.api import ExtractRequest
from schemas.content_hash import content_hash
from schemas.keys import FeatureKey
from schemas.tensors import RawTensor
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings


def test_compare_same_backend_is_bitwise_equal(client: FeatureClient) -> None:
    sample = {"text": "def trie_autocomplete(prefix): ..."}
    client.extract([sample])
    report = client.compare(sample, a="torch", b="torch")
    assert [row.layer for row in report.layers] == [1, 2, 3, 4, 5]
    for row in report.layers:
        assert row.bitwise_equal_fraction == 1.0 and row.max_abs_diff == 0.0
        assert row.cosine_min == pytest.approx(1.0, abs=1e-5)
    assert report.extracted == []


def test_compare_refuses_missing_or_unrunnable_sides(client: FeatureClient, http: httpx.Client) -> None:
    sample = {"text": "compare me"}
    client.extract([sample])
    with pytest.raises(NotFoundError, match="backend=fla"):
        client.compare(sample, a="fla", b="torch")
    with pytest.raises(BackendUnavailableError, match="fla"):
        client.compare(sample, a="fla", b="torch", extract=True)
    assert http.get(f"/v1/compare/{'a' * 64}", params={"a": "cuda"}).status_code == 422


def test_audit_reproduces_and_marks_manifests(client: FeatureClient) -> None:
    client.extract([{"text": f"audit {i}"} for i in range(6)])
    report = client.audit(4, seed=1)
    assert (report.total, report.reproduced, report.mismatched) == (4, 4, 0)
    audited = [m for m in client.entries() if m.audit is not None]
    assert len(audited) == 4 and all(m.audit.status == "reproduced" for m in audited)
    assert {m.content_hash for m in audited} == {r.content_hash for r in report.results}


def test_audit_flags_a_version_that_does_not_reproduce(settings: Settings, tiny_loaded: LoadedModel) -> None:
    services = build_services(settings, tiny_loaded)
    original = services.writer.extract(ExtractRequest(samples=[{"text": "drifted"}])).results[0].manifest
    stored = services.store.get(original.content_hash)
    bits = bytearray(stored["hidden_states"].data)
    bits[10] ^= 4  # what an entry written by other kernels (or a silent library change) looks like
    tensors = [
        RawTensor("hidden_states", "bfloat16", stored["hidden_states"].shape, memoryview(bits)),
        stored["input_ids"],
    ]
    drifted, _ = services.recorder.record(
        original.model_copy(update={"content_hash": content_hash(tensors), "seq": None}), tensors
    )
    report = services.auditor.audit(10)
    assert (report.total, report.reproduced, report.mismatched) == (2, 1, 1)
    flagged = services.reader.resolve(FeatureKey(prompt_hash=original.prompt_hash, content_hash=drifted.content_hash))
    assert flagged.audit is not None and flagged.audit.status == "mismatch"
    assert flagged.audit.reproduced_hash == original.content_hash
