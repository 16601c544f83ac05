"""Packs give each sequence the bits of the model's own forward of it by construction: every aten op a pack runs that
is not pointwise, a view or a copy is called exactly as the one-sequence forwards of its sequences call it (the same
op, shapes, strides up to size-1 axes, and dtypes), as often, and the pack calls no other. This is about shapes, not
bits, so it holds on any host; where the kernels are deterministic for a shape, equal bits follow (tests/gpu holds
the bits themselves at the 27B shape, which Triton's kernels, invisible here, take part in too).

An earlier release's packs, which ran the linear layers and norms over the whole pack, fail the same comparison."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compute.forward import ForwardPlan
from schemas.backend import PINNED_ATTENTION, Backend
from schemas.batching import PackPolicy
from schemas.featureset import FeatureSet
from service.extraction.alone import TokenSequence, forward_alone
from service.extraction.extractor import Extractor
from service.extraction.packing import plan_packs
from service.extraction.run_plan import RunPlan
from service.model import fused as fused_module
from service.model.fp8_weights import Fp8Scheme, gemm_counts, quantize_in_place
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel, load_spec, load_weights
from service.model.revision_cache import cached_model_revision
from tests.service.model.test_fused import CountingReferenceKernels
from tests.support.rerun_recorder import RerunRecorder

EVERY_LAYER = ForwardPlan.of(FeatureSet(layers=["embed", *range(8), "final_norm"]), 8)  # the tiny models' 8 layers
# Ops that move or make values without arithmetic whose result could depend on a shape (the embedding is a gather)
COPIES = frozenset(
    {
        "_to_copy", "copy_", "clone", "cat", "stack", "embedding", "index_select", "empty", "empty_like",
        "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros", "full", "fill_",
        "zero_", "ones", "ones_like", "arange", "lift_fresh", "_unsafe_view", "triu", "masked_fill", "detach",
    }
)  # fmt: skip


def _row_wise_mean(func: Any, args: tuple) -> bool:
    """A mean over the last axis of at least `ROW_WISE_MEAN_ROWS` rows of at least `ROW_WISE_MEAN_COLUMNS`: on CUDA
    each row's bits whatever the count (own_rows.py; tests/gpu hold the bits), so a pack takes it once over its rows."""
    if func.overloadpacket.__name__ != "mean" or len(args) < 2 or list(args[1]) not in ([-1], [args[0].dim() - 1]):
        return False
    columns = args[0].shape[-1]
    return columns > 0 and fused_module.row_wise_mean(args[0].numel() // columns, columns)


def _depends_on_rows(func: Any, args: tuple) -> bool:
    if torch.Tag.pointwise in func.tags or func.overloadpacket.__name__ in COPIES or _row_wise_mean(func, args):
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tensors and not any(t.is_floating_point() for t in tensors):
        return False  # integers and booleans (a mask's positions) are exact at any shape
    schema = func._schema
    is_view = not schema.is_mutable and any(ret.alias_info is not None for ret in schema.returns)
    return not is_view


def _described(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        strides = tuple(stride if size > 1 else 0 for size, stride in zip(value.shape, value.stride(), strict=True))
        return (tuple(value.shape), strides, value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_described(v) for v in value)
    return repr(value)


class RowDependentOps(TorchDispatchMode):
    """Counts every call of an op whose result can depend on its shape, by op and described arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if _depends_on_rows(func, args):
            given = {name: value for name, value in kwargs.items() if name != "out"}  # mm's out form is mm
            self.calls[(func.overloadpacket.__name__, _described(args), _described(sorted(given.items())))] += 1
        return func(*args, **kwargs)


def _sequences(lengths: list[int]) -> list[TokenSequence]:
    generator = torch.Generator().manual_seed(sum(lengths))
    return [TokenSequence(torch.randint(0, 250, (n,), generator=generator).tolist(), n, None) for n in lengths]


def _traced(loaded: LoadedModel, run: Any) -> Counter:
    # no_grad, not inference_mode: under inference_mode a dispatch mode sees composite ops (linear, matmul) before
    # they decompose into the ops that run (mm), where the product's per-sequence GEMMs are seen as what they are
    with torch.no_grad(), loaded.kernels.running(Backend.TORCH), RowDependentOps() as ops:
        run()
    return ops.calls


@pytest.mark.parametrize("fuse", [False, True], ids=["eager", "fused forwards"])
@pytest.mark.parametrize(
    ("own_rows", "replayed"),
    [(True, False), (True, True), (False, False)],
    ids=["own-rows packs", "own-rows packs, layers replayed", "an earlier release's packs"],
)
def test_a_pack_runs_exactly_the_row_dependent_ops_of_its_sequences_own_forwards(
    tiny_loaded: LoadedModel, own_rows: bool, replayed: bool, fuse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the fused forwards too (their Triton kernels' arithmetic as torch ops, so the CPU runs them): their
    one-pass norms run over the pack, the two passes around torch's mean at its own rows for the 9-token sequence
    (under 16 rows).
    Layers replayed from recordings of their kind's template (layer_graphs.py; rerun here, so their ops are seen) run
    what the model's own layers run."""
    # the tiny model's rows (16 and 64 columns) are narrower than the 27B's that the CUDA rule is held for; the
    # comparison is of shapes, so the pack takes its whole means here as it does there
    monkeypatch.setattr(fused_module, "ROW_WISE_MEAN_COLUMNS", 16)
    recorder = RerunRecorder() if replayed else None
    extractor = Extractor(tiny_loaded, fuse=False, recorder=recorder)
    fused = FusedForwards(tiny_loaded.model, CountingReferenceKernels()) if fuse else None
    policy = PackPolicy(tokens=256, align=16, own_rows=own_rows)
    sequences = _sequences([120, 70, 30, 9])
    (pack,) = plan_packs([len(s.ids) for s in sequences], policy)
    run = RunPlan.of(tiny_loaded, Backend.TORCH, fused, policy, PINNED_ATTENTION, extractor._replays(policy), None)
    packed = _traced(
        tiny_loaded,
        lambda: extractor._forward_pack(pack, sequences, EVERY_LAYER, run),
    )
    alone: Counter = Counter()
    for seq in sequences:
        alone += _traced(tiny_loaded, lambda seq=seq: forward_alone(tiny_loaded, seq, EVERY_LAYER, fused))
    assert alone and any(name == "mm" for name, *_ in alone)  # the linear layers are among what is compared
    if own_rows:
        assert packed == alone, {"only in the pack": packed - alone, "only alone": alone - packed}
        assert extractor.graphs is None if recorder is None else extractor.graphs.replays > 0
    else:
        assert packed != alone  # what the earlier packs did: GEMMs and norms over all 256 rows


def test_an_fp8_target_without_the_block_scaled_gemm_packs_each_sequence_with_its_own_forwards_bits(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Where cuBLAS's block-scaled GEMM does not run (this CPU; any GPU but a Hopper), an FP8 layer in a pack runs
    the class's dequantised forward once per sequence at its own rows: each sequence's states are its own forward's."""
    loaded = load_weights(load_spec(tiny_model_dir, cached_model_revision(tiny_model_dir, tmp_path / "r.json"), "cpu"))
    quantize_in_place(loaded.model, Fp8Scheme())
    assert gemm_counts(loaded.model) == {"dequantised-linear": 50}
    extractor = Extractor(loaded, fuse=False, recorder=None)
    policy = PackPolicy(tokens=256, align=16, own_rows=True)
    sequences = _sequences([120, 70, 30, 9])
    (pack,) = plan_packs([len(s.ids) for s in sequences], policy)
    run = RunPlan.of(loaded, Backend.TORCH, None, policy, PINNED_ATTENTION, extractor._replays(policy), None)
    with torch.inference_mode(), loaded.kernels.running(Backend.TORCH):
        packed, *_ = extractor._forward_pack(pack, sequences, EVERY_LAYER, run)
        for segment in pack.segments:
            alone, _, _ = forward_alone(loaded, sequences[segment.index], EVERY_LAYER)
            assert torch.equal(packed[0, segment.start : segment.start + segment.length], alone), segment
