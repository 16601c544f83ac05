"""Inside a pack, every op whose bits can depend on how many rows it runs over runs at each sequence's own rows, laid
out as the model's own forward of that sequence alone lays them out: so a packed sequence gets that forward's bits.

Why: at the 27B shape cuBLAS picks other kernels for the same rows at another row count (`in_proj_a`/`in_proj_b`
at every M below 8,192, `k_proj`/`v_proj` at M <= 129, `down_proj` at M <= 200; GPU.md), and a reduction's launch
shape follows its row count, so packs that ran them over the whole pack gave bits the model's forward of the sequence
does not, from layer 1 on. What stays packed computes each output element from its own inputs by one function at any
shape: torch's pointwise kernels and our fused ones on CUDA (proven on every bfloat16 input), views, copies and the
embedding's gather. Everything else runs here per sequence, on the modules listed in `own_rows_targets` (every linear
layer, FP8 ones included, and every RMSNorm), or in packing.py (the token mixers); the fused norms, whose mean is a
reduction that keeps each row's bits at any count of rows from 16 on (`ROW_WISE_MEAN_ROWS`, service/model/fused.py),
run once over the pack, and again at their own rows for shorter sequences. A test traces
every aten op of a pack and of each sequence's own forward and holds the two equal for every op that is not pointwise,
a view or a copy (tests/service/extraction/test_own_rows.py).

A sequence's slice of a packed tensor is handed on as it is where its strides are what the op would see alone (up to
the stride of a size-1 axis, which no kernel reads), and as a copy laid out so otherwise (`alone`). Starts are
aligned to 64 tokens, so every slice begins at a multiple of 512 bytes from its tensor's start, as a fresh
allocation of the caching allocator does: kernels that choose by alignment choose alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from service.model.fp8_activations import PackQuantization
from service.model.fp8_weights import Fp8Linear
from service.model.fused import FusedForwards, row_wise_mean

Spans = list[tuple[int, int]]  # each sequence's [start, end) token rows in the pack


def alone(part: torch.Tensor, axis: int, tokens: int) -> torch.Tensor:
    """A sequence's slice `part` of a packed tensor of `tokens` rows (along `axis`) laid out as the same tensor computed
    for the sequence alone is: an axis laid out outside the token axis (heads before tokens, say) strides over the
    sequence's rows there, not the pack's. A view where that changes nothing, else a copy so laid out."""
    rows, step = part.shape[axis], part.stride(axis)
    strides = [
        stride // tokens * rows if size > 1 and stride > step and stride % tokens == 0 else stride
        for size, stride in zip(part.shape, part.stride(), strict=True)
    ]
    if strides == list(part.stride()):
        return part
    return torch.empty_strided(part.shape, strides, dtype=part.dtype, device=part.device).copy_(part)


def token_axis(x: torch.Tensor, tokens: int) -> tuple[int, int]:
    """(axis, rows per token) of a packed tensor: the first axis whose size is a multiple of the pack's `tokens`,
    after only size-1 axes ([1, P, H], or [P * heads, d] for a per-head norm)."""
    for axis, size in enumerate(x.shape):
        if size >= tokens and size % tokens == 0:
            return axis, size // tokens
        if size != 1:
            break
    raise ValueError(f"a tensor of shape {tuple(x.shape)} is not one of a pack of {tokens} tokens")


def sequence_part(x: torch.Tensor, start: int, end: int, tokens: int) -> torch.Tensor:
    """Rows [start, end) of a packed tensor, laid out as alone."""
    axis, per_token = token_axis(x, tokens)
    return alone(x.narrow(axis, start * per_token, (end - start) * per_token), axis, tokens * per_token)


class PackRows:
    """A pack's sequences as rows: what runs once per sequence, at its own rows (the fused forwards' `Rows`)."""

    def __init__(self, spans: Spans, tokens: int) -> None:
        self.spans = spans
        self.tokens = tokens

    def each(self, op: Callable[..., torch.Tensor], *packed: torch.Tensor) -> torch.Tensor:
        """`op` once per sequence on its rows of every input, each laid out as alone; the results in one packed
        tensor (filler rows left unwritten: nothing but row-wise ops ever reads them)."""
        return self._into(None, op, self.spans, packed)

    def row_wise(
        self, whole: Callable[[], torch.Tensor], own: Callable[..., torch.Tensor], *packed: torch.Tensor
    ) -> torch.Tensor:
        """`whole()` over the pack where a sequence has `ROW_WISE_MEAN_ROWS` rows or more (its rows reduced as at its
        own rows), `own` at its own rows for each that has fewer, straight into its rows of the result."""
        columns = packed[0].shape[-1]
        rows_per_token = packed[0].numel() // columns // self.tokens  # a per-head norm: a row per head of each token
        apart = [(s, e) for s, e in self.spans if not row_wise_mean((e - s) * rows_per_token, columns)]
        return self._into(whole() if len(apart) < len(self.spans) else None, own, apart, packed)

    def _into(
        self, out: torch.Tensor | None, op: Callable[..., torch.Tensor], spans: Spans, packed: tuple[torch.Tensor, ...]
    ) -> torch.Tensor:
        """`op` on each of `spans`' rows of every input, laid out as alone, written into its rows of `out` (made at
        the first result when None)."""
        axis, _ = token_axis(packed[0], self.tokens)
        for start, end in spans:
            result = op(*(sequence_part(x, start, end, self.tokens) for x in packed))
            rows_out = result.shape[axis] // (end - start)
            if out is None:
                shape = list(result.shape)
                shape[axis] = self.tokens * rows_out
                out = result.new_empty(shape)
            out.narrow(axis, start * rows_out, (end - start) * rows_out).copy_(result)
        assert out is not None, "a pack holds at least one sequence"
        return out


def _linear(module: nn.Linear, rows: PackRows) -> Callable[[torch.Tensor], torch.Tensor]:
    """nn.Linear without a bias: `F.linear` of a [1, T, K] input is `mm` of its [T, K] rows (torch folds it), so each
    sequence's `mm` writes straight into its rows of the packed output (`mm`'s out form runs the same kernel)."""
    weight_t = module.weight.t()

    def forward(x: torch.Tensor) -> torch.Tensor:
        if module.bias is not None or x.dim() != 3 or x.shape[:2] != (1, rows.tokens) or not x.is_contiguous():
            return rows.each(lambda part: nn.Linear.forward(module, part), x)
        out = x.new_empty((*x.shape[:-1], weight_t.shape[1]))
        for start, end in rows.spans:
            torch.mm(x[0, start:end], weight_t, out=out[0, start:end])
        return out

    return forward


class _QuantizedInputs:
    """Each sequence's FP8 activations of the packed input quantized last: a layer's projections of one input (q, k
    and v; gate and up; in_proj_qkv and in_proj_z) quantize it once, for every sequence in one launch
    (`PackQuantization`). Quantization is per token and 128 columns, so a sequence's values and scales are the same
    whichever projection asked first and whatever shares the pack. Held by identity (and kept alive, so its id is
    never another tensor's) until another input is quantized."""

    def __init__(self, rows: PackRows) -> None:
        self.rows = rows
        self._layout: PackQuantization | None = None  # made at the first FP8 layer (a bfloat16 model has none)
        self._input: torch.Tensor | None = None
        self._parts: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def layout(self) -> PackQuantization:
        if self._layout is None:
            self._layout = PackQuantization(self.rows.spans, self.rows.tokens)
        return self._layout

    def of(self, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if x is not self._input:
            self._input = x
            self._parts = self.layout.quantize(x[0])
        return self._parts


def _fp8_linear(module: Fp8Linear, rows: PackRows, inputs: _QuantizedInputs) -> Callable[[torch.Tensor], torch.Tensor]:
    """The block-scaled GEMM once per sequence, straight into its rows of the packed output (its padding rows, up to
    3, land in the filler before the next aligned start); the activations quantized once per input."""

    def alone(part: torch.Tensor) -> torch.Tensor:
        return Fp8Linear.forward(module, part)  # the class's: this module's own forward is this closure

    def forward(x: torch.Tensor) -> torch.Tensor:
        if module.gemm != "scaled-mm-blockwise" or x.dim() != 3 or x.shape[:2] != (1, rows.tokens):
            return rows.each(alone, x)
        if not inputs.layout.fits:  # a sequence's padding rows would be the next one's (starts aligned to < 4)
            return rows.each(alone, x)
        out = x.new_empty((rows.tokens, module.out_features))
        for (start, _), (quantized, scales) in zip(rows.spans, inputs.of(x), strict=True):
            module.scaled_mm(quantized, scales, x.dtype, out=out[start : start + quantized.shape[0]])
        return out.view(1, rows.tokens, module.out_features)

    return forward


def _per_sequence(forward: Callable[..., Any], rows: PackRows) -> Callable[..., Any]:
    def run(*inputs: torch.Tensor) -> torch.Tensor:
        return rows.each(forward, *inputs)

    return run


def _is_norm(module: nn.Module) -> bool:
    name = type(module).__name__
    return name.endswith(("RMSNorm", "RMSNormGated"))


def own_rows_targets(roots: Sequence[nn.Module]) -> list[nn.Module]:
    """The modules under `roots` (a decoder body: embeddings, layers, final norm; the layer graphs' templates) whose
    bits can depend on their row count."""
    return [m for root in roots for m in root.modules() if isinstance(m, (nn.Linear, Fp8Linear)) or _is_norm(m)]


def _own_rows_forward(module: nn.Module, rows: PackRows, inputs: _QuantizedInputs) -> Callable[..., Any]:
    if type(module) is nn.Linear:
        return _linear(module, rows)
    if isinstance(module, Fp8Linear):
        return _fp8_linear(module, rows, inputs)
    return _per_sequence(module.forward, rows)


@contextlib.contextmanager
def own_rows(roots: Sequence[nn.Module], rows: PackRows, fused: FusedForwards | None) -> Iterator[None]:
    """While the block runs, each of the row-count-dependent modules under `roots` runs once per sequence of the pack
    `rows` describes: linear layers here, norms here too unless `fused` gives them forwards that take the pack's rows
    themselves (their square and tail pointwise over the pack, the mean too but for sequences under 16 means)."""
    targets = [m for m in own_rows_targets(roots) if fused is None or not fused.replaces(m)]
    saved = [(module, module.__dict__.get("forward")) for module in targets]
    inputs = _QuantizedInputs(rows)
    try:
        for module in targets:
            # an instance attribute shadows the class's forward for this module alone, until it is removed below
            module.forward = _own_rows_forward(module, rows, inputs)
        yield
    finally:
        for module, before in saved:
            if before is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = before
