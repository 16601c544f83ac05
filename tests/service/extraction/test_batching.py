from __future__ import annotations

import torch

from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from schemas.torch_tensors import to_torch
from service.comparison import compare_hidden_states
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


def test_batched_extraction_matches_one_by_one(settings: Settings, tiny_loaded: LoadedModel) -> None:
    """Right-padded causal batches give the same tokens and (nearly) the same values; on this CPU the linear-
    attention layers before the first full-attention layer are even bitwise equal. The audit (one sequence per
    forward) is what says whether a device's kernels keep every bit."""
    samples = [{"text": "def merge(a, b): return sorted(a + b) " * (i + 1)} for i in range(5)]
    featureset = FeatureSet(layers=[0, 1, 2, 3, 7])
    one = build_library(settings.model_copy(update={"data_dir": settings.data_dir / "one"}), tiny_loaded)
    batched_settings = settings.model_copy(update={"data_dir": settings.data_dir / "batched", "batch_tokens": 4096})
    batched = build_library(batched_settings, tiny_loaded)
    request = ExtractRequest(samples=samples, featureset=featureset)
    for single, together in zip(one.extract(request).results, batched.extract(request).results, strict=True):
        a, b = one.read(single.manifest), batched.read(together.manifest)
        assert torch.equal(to_torch(a.tensors["input_ids"]), to_torch(b.tensors["input_ids"]))
        for row in compare_hidden_states(a.tensors["hidden_states"], b.tensors["hidden_states"], featureset.layers):
            assert row.cosine_min > 0.999, row
            if row.layer in (0, 1, 2):
                assert row.bitwise_equal_fraction == 1.0, row
        assert "batches" in together.manifest.fingerprint.batching
    report = batched.audit(5)
    assert report.total == 5 and report.reproduced + report.mismatched == 5
