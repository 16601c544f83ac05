"""Packs: the planner's layout, a sample's bits independent of its neighbours, features that are the model's
(positions restart, nothing leaks across sequences), and audits that reproduce packed entries alone, an earlier
release's packs' too. That packs run what each sequence's own forward runs is test_own_rows.py's.

The CPU never packs in the product (a development device), so these tests force it. What they assert of the bits
holds on any CPU: at one offset, neighbours change nothing, since every row-wise kernel computes a row from that row
alone at a fixed shape. Other offsets are the GPU's test (tests/gpu/test_packing_on_gpu.py)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import SPECS, Backend
from schemas.batching import PackPolicy
from schemas.featureset import FeatureSet
from service.extraction import extractor as extractor_module
from service.extraction import packing
from service.extraction.extractor import Extractor
from service.extraction.packing import plan_packs
from service.main import build_services
from service.model.encode import EncodedPrompt
from service.model.loader import LoadedModel
from service.settings import Settings

POLICY = PackPolicy(tokens=256, align=16)
EVERY_LAYER = FeatureSet(layers=["embed", *range(8), "final_norm"], target_ids=True, top_k=4)


def test_plans_hold_every_sequence_once_within_the_shape_from_aligned_starts() -> None:
    lengths = [100, 30, 256, 17, 600, 90, 1, 140, 33]
    packs = plan_packs(lengths, POLICY)
    assert sorted(s.index for p in packs for s in p.segments) == list(range(len(lengths)))
    for pack in packs:
        ends = [s.start + s.length for s in pack.segments]
        assert max(ends) <= pack.shape and all(s.start % POLICY.align == 0 for s in pack.segments)
        assert all(a.start + a.length <= b.start for a, b in zip(pack.segments, pack.segments[1:], strict=False))
    (long,) = [p for p in packs if p.shape != POLICY.tokens]
    assert long.shape == 608 and [s.index for s in long.segments] == [4]  # alone, its own rows aligned (600 -> 608)
    earlier = PackPolicy(tokens=256, align=16, own_rows=False)  # an earlier release's: alone in the next multiple
    assert [p.shape for p in plan_packs(lengths, earlier) if p.shape != earlier.tokens] == [768]
    assert PackPolicy.parse(POLICY.describe()) == POLICY and PackPolicy.parse("one sequence per forward") is None


@pytest.fixture
def cpu_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extractor_module, "PACKING_DEVICES", frozenset({"cuda", "cpu"}))


def _encoded(ids: list[int]) -> EncodedPrompt:
    return EncodedPrompt(prompt_ids=ids, completion_ids=None, completion_source=None, greedy_max_new_tokens=None)


def _run(extractor: Extractor, samples: list[list[int]]) -> dict[int, dict[str, torch.Tensor]]:
    items = [(_encoded(ids), f"s{i}") for i, ids in enumerate(samples)]
    done = extractor.extract_many(items, EVERY_LAYER, Backend.TORCH)
    return {index: {t.name: to_torch(t) for t in pending.wait().tensors} for index, pending in done}


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.usefixtures("cpu_packs")
def test_a_sample_gets_the_same_bits_alone_and_with_any_neighbours(tiny_loaded: LoadedModel) -> None:
    extractor = Extractor(tiny_loaded, pack_tokens=POLICY.tokens)
    sample = _ids(120, 0)  # the longest: it sits at offset 0 in every pack below
    alone = _run(extractor, [sample])[0]
    for seed in (1, 2):
        neighbours = [_ids(n, seed * 10 + n) for n in (70, 33, 9)]
        together = _run(extractor, [sample, *neighbours])[0]
        for name, tensor in alone.items():
            assert torch.equal(tensor, together[name]), name


@pytest.mark.usefixtures("cpu_packs")
def test_packed_features_are_the_models_with_nothing_leaking_across_sequences(tiny_loaded: LoadedModel) -> None:
    extractor = Extractor(tiny_loaded, pack_tokens=POLICY.tokens)
    samples = [_ids(120, 3), _ids(90, 4), _ids(40, 5)]
    packed = _run(extractor, samples)
    for index, ids in enumerate(samples):  # each against HF's own forward of it alone, unpacked
        with torch.inference_mode():
            out = tiny_loaded.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        # HF's tuple: embed, layers 0..6, then the final norm's output (layer 7's raw output is only a hook's)
        hf = torch.stack([h[0] for h in out.hidden_states], dim=1)
        hidden = packed[index]["hidden_states"]
        ours = torch.cat([hidden[:, :8], hidden[:, 9:]], dim=1)
        torch.testing.assert_close(ours.float(), hf.float(), rtol=0.02, atol=0.02)
        assert torch.equal(packed[index]["input_ids"], torch.tensor(ids, dtype=torch.int32))


@pytest.mark.usefixtures("cpu_packs")
def test_packed_entries_say_so_and_their_audit_reproduces_them_alone(settings: Settings, tiny_loaded) -> None:
    services = build_services(settings.model_copy(update={"pack_tokens": POLICY.tokens}), tiny_loaded)
    samples = [{"text": "def merge(a, b): return sorted(a + b) " * (i + 1)} for i in range(5)]
    results = services.writer.extract(ExtractRequest(samples=samples, featureset=EVERY_LAYER)).results
    assert {r.manifest.fingerprint.batching for r in results} == {PackPolicy(POLICY.tokens).describe()}
    report = services.auditor.audit(5)  # each alone in a pack now: other neighbours than when it was stored
    assert (report.total, report.reproduced) == (5, 5)
    services.close()


def test_the_cpu_never_packs_unless_forced(settings: Settings, tiny_loaded: LoadedModel) -> None:
    assert Extractor(tiny_loaded, pack_tokens=16384).pack_policy is None
    services = build_services(settings, tiny_loaded)  # the default pack_tokens is on: CUDA only
    result = services.writer.extract(ExtractRequest(samples=[{"text": "x = 1"}])).results[0]
    assert result.manifest.fingerprint.batching == "one sequence per forward, no padding"
    services.close()


@pytest.mark.usefixtures("cpu_packs")
def test_entries_of_an_earlier_releases_packs_still_audit_under_their_own_policy(
    settings: Settings, tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries written by the fixed-shape packs (GEMMs over the whole pack) name that policy; the audit re-extracts
    them under it, so they keep reproducing, while new entries are the model's own forward."""
    earlier = PackPolicy(POLICY.tokens, POLICY.align, own_rows=False)
    services = build_services(settings.model_copy(update={"pack_tokens": POLICY.tokens}), tiny_loaded)
    samples = [{"text": "def merge(a, b): return sorted(a + b) " * (i + 1)} for i in range(4)]
    with monkeypatch.context() as patched:  # what that release's service ran
        patched.setattr(Extractor, "pack_policy", property(lambda self: earlier))
        results = services.writer.extract(ExtractRequest(samples=samples, featureset=EVERY_LAYER)).results
    assert {r.manifest.fingerprint.batching for r in results} == {earlier.describe()}
    assert not any(r.manifest.fingerprint.own_forward() for r in results)
    report = services.auditor.audit(4)
    assert (report.total, report.reproduced) == (4, 4)
    services.close()


class _RuleCalls:
    """A modeling module's token-mixing names, the rule a stand-in for fla's that records how it was called."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.causal_conv1d_fn = None
        self.ALL_ATTENTION_FUNCTIONS = None
        self.torch_chunk_gated_delta_rule = self.rule

    def rule(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kw: object) -> tuple:
        self.calls.append({"rows": query.shape[1], "qkv": (query, key, value), **kw})
        return torch.zeros_like(value), None


@pytest.mark.parametrize("splits", [False, True], ids=["fla as it comes", "fla told to split long sequences"])
def test_fla_s_rule_runs_once_over_an_own_rows_pack_unless_fla_would_split_its_sequences(
    monkeypatch: pytest.MonkeyPatch, splits: bool
) -> None:
    """The varlen call gives each sequence its plain call's bits (tests/gpu holds them at the 27B width) only while
    fla computes every sequence of it whole: with its intra-card splitting on, each sequence is called alone."""
    monkeypatch.setattr(packing, "_fla_splits_sequences", lambda: splits)
    (pack,) = plan_packs([100, 30], POLICY)
    module = _RuleCalls()
    q = torch.zeros(1, 256, 2, 4)
    with packing.per_sequence(module, pack, POLICY, SPECS[Backend.FLA].fast):  # type: ignore[arg-type]
        module.torch_chunk_gated_delta_rule(q, q, q, g=q[..., 0], beta=q[..., 0])
    if splits:
        assert [(c["rows"], "cu_seqlens" in c) for c in module.calls] == [(100, False), (30, False)]
    else:
        (call,) = module.calls
        assert call["rows"] == 256 and call["cu_seqlens_cpu"].tolist() == [0, 100, 112, 142, 256]
    with packing.per_sequence(module, pack, POLICY, SPECS[Backend.TORCH].fast):  # type: ignore[arg-type]
        module.calls.clear()
        module.torch_chunk_gated_delta_rule(q, q, q, g=q[..., 0], beta=q[..., 0])
    assert [c["rows"] for c in module.calls] == [100, 30]  # torch's reference: no varlen form


def test_fla_s_rule_gets_q_k_and_v_contiguous_with_their_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer hands the rule q, k and v as views of the conv's one output (rows of all three apart); the varlen
    call gets each contiguous, bit for bit, as fla's own input guard would make it."""
    monkeypatch.setattr(packing, "_fla_splits_sequences", lambda: False)
    (pack,) = plan_packs([100, 30], POLICY)
    module = _RuleCalls()
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    mixed = every[: 256 * 32].view(1, 256, 32)
    q, k, v = (t.reshape(1, 256, -1, 4) for t in torch.split(mixed, [8, 8, 16], dim=-1))
    with packing.per_sequence(module, pack, POLICY, SPECS[Backend.FLA].fast):  # type: ignore[arg-type]
        module.torch_chunk_gated_delta_rule(q, k, v, g=q[..., 0], beta=q[..., 0])
    (call,) = module.calls
    for given, handed in zip((q, k, v), call["qkv"], strict=True):
        assert not given.is_contiguous() and handed.is_contiguous()
        assert torch.equal(given.contiguous().view(torch.int16), handed.view(torch.int16))
    odd = mixed[..., 1:5]  # rows a multiple of 2 bytes only: copied as bfloat16
    assert torch.equal(packing.contiguous(odd).view(torch.int16), odd.contiguous().view(torch.int16))


def test_causal_conv1d_writes_each_sequences_conv_into_its_rows_of_the_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below transformers' binding, causal-conv1d's forward allocates its output and runs its op into it; during a
    pack its output is the sequence's rows of the pack's (a stand-in for the package, whose op here doubles x)."""
    written: list[int] = []

    def op(*, x: torch.Tensor, out: torch.Tensor, **_: object) -> None:
        written.append(out.data_ptr())
        out.copy_(x * 2)

    def own(x: torch.Tensor, *args: object) -> torch.Tensor:
        out = torch.empty_like(x)
        op(x=x, out=out)
        return out

    package = types.ModuleType("causal_conv1d")
    package.causal_conv1d_interface = types.SimpleNamespace(causal_conv1d_fwd_function=own)  # type: ignore[attr-defined]
    package.cpp_functions = types.SimpleNamespace(_causal_conv1d_fwd_cpp=op)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "causal_conv1d", package)
    interface = package.causal_conv1d_interface  # type: ignore[attr-defined]

    def bound(x: torch.Tensor, weight: torch.Tensor, bias: object = None, activation: object = None) -> torch.Tensor:
        return interface.causal_conv1d_fwd_function(x, weight, bias, None, None, None, True)  # as the package's

    (pack,) = plan_packs([100, 30], POLICY)
    module = _RuleCalls()
    module.causal_conv1d_fn = bound  # type: ignore[assignment]
    x = torch.randn(1, 256, 8).transpose(1, 2)  # [B, C, T] channel-last, as the layer hands it over
    with packing.per_sequence(module, pack, POLICY, SPECS[Backend.FLA].fast):  # type: ignore[arg-type]
        out = module.causal_conv1d_fn(x, torch.ones(8, 4))  # type: ignore[misc]
    starts = [segment.start for segment in pack.segments]
    assert written == [out[:, :, start:].data_ptr() for start in starts]  # no copy of its own, no copy after
    for segment in pack.segments:
        rows = slice(segment.start, segment.start + segment.length)
        assert torch.equal(out[:, :, rows], x[:, :, rows] * 2)
    assert interface.causal_conv1d_fwd_function is own  # the package's own again after each sequence
