from __future__ import annotations

from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from service.extraction.batching import plan_batches
from service.main import build_library
from service.model.loader import LoadedModel
from service.settings import Settings


def test_plan_batches_respects_the_token_budget() -> None:
    lengths = [100, 700, 300, 300, 50, 1200]
    batches = plan_batches(lengths, batch_tokens=1200)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 1200 or len(batch) == 1
    assert batches[0] == [5]  # longest first
    assert plan_batches(lengths, batch_tokens=0) == [[5], [1], [2], [3], [0], [4]]


def test_batching_only_where_it_keeps_every_bit(settings: Settings, tiny_loaded: LoadedModel) -> None:
    """Asked to batch, the extractor first probes whether batches keep every bit on this device. On this CPU the
    full-attention layers do not (measured), so it extracts one sequence per forward: every entry equals one-by-one
    extraction bit for bit, the fingerprint names the policy that really ran, and the audit agrees."""
    samples = [{"text": "def merge(a, b): return sorted(a + b) " * (i + 1)} for i in range(5)]
    request = ExtractRequest(samples=samples, featureset=FeatureSet(layers=[0, 1, 2, 3, 7]))
    one = build_library(settings.model_copy(update={"data_dir": settings.data_dir / "one"}), tiny_loaded)
    batched_settings = settings.model_copy(update={"data_dir": settings.data_dir / "batched", "batch_tokens": 4096})
    batched = build_library(batched_settings, tiny_loaded)
    for single, together in zip(one.extract(request).results, batched.extract(request).results, strict=True):
        assert single.manifest.content_hash == together.manifest.content_hash
        assert together.manifest.fingerprint.batching == "one sequence per forward, no padding"
    report = batched.audit(5)
    assert (report.total, report.reproduced) == (5, 5)
