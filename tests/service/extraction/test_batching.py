"""Batching may change how fast, never the bits. Whether right-padded batches keep every bit is a property of the
kernels and the CPU or GPU at hand, so these tests force the probe's answer each way (on a device kind where
batching may run at all) and, on the real probe, assert only what must hold whatever it finds."""

from __future__ import annotations

import pytest
import torch

from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.extraction import bit_checks
from service.extraction.batching import describe, plan_batches
from service.extraction.bit_checks import BitChecks
from service.main import Services, build_services
from service.model.loader import LoadedModel
from service.settings import Settings

SAMPLES = [{"text": "def merge(a, b): return sorted(a + b) " * (i + 1)} for i in range(5)]
REQUEST = ExtractRequest(samples=SAMPLES, featureset=FeatureSet(layers=[0, 1, 2, 3, 7]))
BUDGET = 4096


def test_plan_batches_respects_the_token_budget() -> None:
    lengths = [100, 700, 300, 300, 50, 1200]
    batches = plan_batches(lengths, batch_tokens=1200)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 1200 or len(batch) == 1
    assert batches[0] == [5]  # longest first
    assert plan_batches(lengths, batch_tokens=0) == [[5], [1], [2], [3], [0], [4]]


@pytest.fixture
def cpu_may_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the probe decide on the CPU, as it does on a GPU: the forced-probe tests below test that decision."""
    monkeypatch.setattr(bit_checks, "BATCHING_DEVICES", frozenset({"cuda", "cpu"}))


def _libraries(settings: Settings, loaded: LoadedModel) -> tuple[Services, Services]:
    one = build_services(settings.model_copy(update={"data_dir": settings.data_dir / "one"}), loaded)
    update = {"data_dir": settings.data_dir / "batched", "batch_tokens": BUDGET}
    return one, build_services(settings.model_copy(update=update), loaded)


@pytest.mark.usefixtures("cpu_may_batch")
def test_a_probe_that_finds_changed_bits_keeps_one_sequence_per_forward(
    settings: Settings, tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch, forward_sizes: list[int]
) -> None:
    monkeypatch.setattr(BitChecks, "_batching_keeps_bits", lambda self, budget: False)
    one, batched = _libraries(settings, tiny_loaded)
    expected = [r.manifest.content_hash for r in one.writer.extract(REQUEST).results]
    forward_sizes.clear()
    sizes = forward_sizes
    results = batched.writer.extract(REQUEST).results
    assert sizes and max(sizes) == 1  # no forward held two sequences
    assert [r.manifest.content_hash for r in results] == expected
    assert {r.manifest.fingerprint.batching for r in results} == {describe(0)}


@pytest.mark.usefixtures("cpu_may_batch")
def test_a_probe_that_finds_every_bit_kept_batches_and_says_so(
    settings: Settings, tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch, forward_sizes: list[int]
) -> None:
    monkeypatch.setattr(BitChecks, "_batching_keeps_bits", lambda self, budget: True)
    one, batched = _libraries(settings, tiny_loaded)
    alone = {r.prompt_hash: r.manifest for r in one.writer.extract(REQUEST).results}
    forward_sizes.clear()
    sizes = forward_sizes
    results = batched.writer.extract(REQUEST).results
    assert max(sizes) > 1  # sequences really shared forwards
    assert {r.manifest.fingerprint.batching for r in results} == {describe(BUDGET)}
    for result in results:  # the same tokens and shapes; the bits are whatever this host's batched kernels give
        single = alone[result.prompt_hash]
        layout = {name: (t.dtype, t.shape) for name, t in result.manifest.tensors.items()}
        assert layout == {name: (t.dtype, t.shape) for name, t in single.tensors.items()}
        batched_hidden = batched.reader.read(result.manifest).tensors["hidden_states"].numpy()
        single_hidden = one.reader.read(single).tensors["hidden_states"].numpy()
        as_float = [
            torch.from_numpy(h.astype("int32") << 16).view(torch.float32) for h in (batched_hidden, single_hidden)
        ]
        torch.testing.assert_close(*as_float, rtol=0.05, atol=0.05)


def test_the_cpu_never_batches_whatever_a_probe_finds(
    settings: Settings, tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch, forward_sizes: list[int]
) -> None:
    """A probe on a few shapes proved nothing for other shapes on one EPYC host: the CPU runs one by one."""
    probed: list[int] = []
    monkeypatch.setattr(BitChecks, "_batching_keeps_bits", lambda self, budget: probed.append(budget) or True)
    one, batched = _libraries(settings, tiny_loaded)
    expected = [r.manifest.content_hash for r in one.writer.extract(REQUEST).results]
    forward_sizes.clear()
    results = batched.writer.extract(REQUEST).results
    assert max(forward_sizes) == 1 and not probed
    assert [r.manifest.content_hash for r in results] == expected
    assert {r.manifest.fingerprint.batching for r in results} == {describe(0)}


def test_the_real_probe_never_costs_a_bit(settings: Settings, tiny_loaded: LoadedModel) -> None:
    """Whatever this host's probe finds: every entry equals one-by-one extraction bit for bit, the fingerprint
    names the policy that ran, and the audit (one sequence per forward) reproduces every entry."""
    one, batched = _libraries(settings, tiny_loaded)
    keeps_bits = batched.models.extractor().batching_keeps_bits(BUDGET, Backend.TORCH)
    policy = describe(BUDGET if keeps_bits else 0)
    for single, together in zip(
        one.writer.extract(REQUEST).results, batched.writer.extract(REQUEST).results, strict=True
    ):
        assert single.manifest.content_hash == together.manifest.content_hash
        assert together.manifest.fingerprint.batching == policy
    report = batched.auditor.audit(5)
    assert (report.total, report.reproduced) == (5, 5)
