"""Packed forwards: many sequences share one forward of `tokens` positions (the rest filler), and each gets the
bits of the model's own forward of it alone.

Which pack a sample lands in, and where, changes nothing: every op whose bits can depend on its row count runs at the
sequence's own rows (own_rows.py: the linear layers and norms; here: the token mixers, i.e. the causal conv, the
gated delta rule and full attention, causal with positions restarting at 0), laid out as alone; everything else is
computed row by row. A sequence longer than `tokens` runs alone in a pack of its own length (aligned: the memory
plan counts rows, and filler rows cost as many as real ones; an earlier release's packs used the next multiple of
`tokens`). Starts are aligned to `align` tokens, so every sequence's slice of a packed tensor starts 512-byte
aligned, as a fresh tensor does.

Packs of an earlier release ran the linear layers and norms over the whole pack, and fla's rule once over the pack
with `cu_seqlens` (`own_rows=False`). Their bits did not depend on the neighbours but were not the model's own
forward's; they run still, only to audit what they wrote.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from schemas.backend import RULE as RULE_ROLE
from schemas.batching import PackPolicy
from service.extraction.own_rows import Spans, alone

# What the modeling module calls for the parts that mix tokens: swapped for per-sequence versions during a pack
CONV, RULE, ATTENTION = "causal_conv1d_fn", "torch_chunk_gated_delta_rule", "ALL_ATTENTION_FUNCTIONS"


@dataclass(frozen=True, slots=True)
class Segment:
    index: int  # into the sequences planned
    start: int
    length: int


@dataclass(frozen=True, slots=True)
class Pack:
    shape: int
    segments: tuple[Segment, ...]


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def plan_packs(lengths: list[int], policy: PackPolicy) -> list[Pack]:
    """First fit, longest first: each sequence into the first pack with room from an aligned start."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    open_packs: list[tuple[int, list[Segment]]] = []  # (next aligned start, segments)
    alone: list[Pack] = []
    for index in order:
        n = lengths[index]
        if n > policy.tokens:  # own rows: its own length (aligned), not the next multiple, which held filler rows
            rows = _round_up(n, policy.align if policy.own_rows else policy.tokens)
            alone.append(Pack(rows, (Segment(index, 0, n),)))
            continue
        for slot, (start, segments) in enumerate(open_packs):
            if start + n <= policy.tokens:
                segments.append(Segment(index, start, n))
                open_packs[slot] = (_round_up(start + n, policy.align), segments)
                break
        else:
            open_packs.append((_round_up(n, policy.align), [Segment(index, 0, n)]))
    return alone + [Pack(policy.tokens, tuple(segments)) for _, segments in open_packs]


def pack_inputs(pack: Pack, ids: list[list[int]], device: torch.device, pin: bool) -> dict[str, Any]:
    """The body's inputs for one pack: token ids [1, shape] (filler 0), positions restarting per sequence, and no
    masks (attention is per sequence, causal)."""
    tokens = torch.zeros((1, pack.shape), dtype=torch.long, pin_memory=pin)
    positions = torch.zeros((1, pack.shape), dtype=torch.long, pin_memory=pin)
    for segment in pack.segments:
        tokens[0, segment.start : segment.start + segment.length] = torch.tensor(ids[segment.index])
        positions[0, segment.start : segment.start + segment.length] = torch.arange(segment.length)
    return {
        "input_ids": tokens.to(device, non_blocking=True),
        "position_ids": positions.to(device, non_blocking=True),
        "attention_mask": {"full_attention": None, "linear_attention": None},
    }


@contextlib.contextmanager
def per_sequence(module: ModuleType, pack: Pack, policy: PackPolicy, fast: frozenset[str]) -> Iterator[None]:
    """While the block runs, the modeling module's token-mixing calls give each sequence of `pack` what it gets alone
    (through whatever is bound there now: the kernel recorder of the backend that runs); the filler rows of their
    outputs are left unwritten or hold filler's own results (only row-wise ops read them). `fast`: the roles the
    backend binds to the fast packages' kernels (schemas/backend.py).

    fla's rule runs once over the pack, every sequence (and every stretch of filler) a sequence of its own, through
    its varlen form (`cu_seqlens`): each chunk is computed by the program and arithmetic of the sequence's own call
    from its own rows alone; only which program runs it changes, so the bits are the plain call's (the GPU tests hold
    them at the 27B width). One call per layer instead of one per sequence: a short-mix pack's rule took 22% less GPU
    time on the H200, its launches one in ten. Torch's reference rule (no varlen form), the conv and attention run
    once per sequence, on rows laid out as alone (causal-conv1d's `seq_idx` form gives the same bits but took more
    GPU time than its calls per sequence). An earlier release's packs ran the rule so too, the rest on slices as
    they lie."""
    spans = [(s.start, s.start + s.length) for s in pack.segments]

    def part(x: torch.Tensor, axis: int, start: int, end: int) -> torch.Tensor:
        rows = x.narrow(axis, start, end - start)
        return alone(rows, axis, pack.shape) if policy.own_rows else rows

    saved = {name: getattr(module, name) for name in (CONV, RULE, ATTENTION)}
    setattr(module, CONV, _conv(saved[CONV], spans, part))
    rule_over_pack = RULE_ROLE in fast and (not policy.own_rows or not _fla_splits_sequences())
    rule = _varlen_rule(saved[RULE], spans, pack.shape) if rule_over_pack else _rule(saved[RULE], spans, part)
    setattr(module, RULE, rule)
    setattr(module, ATTENTION, _Attention(saved[ATTENTION], spans, part))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _fla_splits_sequences() -> bool:
    """fla's intra-card context parallelism (off unless FLA_INTRACARD_CP is set) splits a long sequence of a varlen
    call into pieces merged afterwards: other arithmetic than the sequence's plain call."""
    try:
        from fla.ops.common.backends.intracard import IntraCardCPBackend
    except ImportError:  # an fla without it
        return False
    return IntraCardCPBackend().is_enabled()


Part = Callable[[torch.Tensor, int, int, int], torch.Tensor]  # (packed, token axis, start, end) -> rows


def _conv(inner: Callable[..., torch.Tensor], spans: Spans, part: Part) -> Callable[..., torch.Tensor]:
    def conv(x: torch.Tensor, weight: torch.Tensor, bias: Any = None, activation: Any = None, **_: Any) -> Any:
        out = torch.empty_like(x)  # [B, C, T], the input's strides (channel-last, as the layer makes it)
        for start, end in spans:
            rows = out[:, :, start:end]
            with _conv_output_into(rows):
                found = inner(part(x, 2, start, end), weight, bias, activation=activation)
            if found.data_ptr() != rows.data_ptr():  # computed elsewhere: torch's reference conv
                rows.copy_(found)
        return out

    return conv


@contextlib.contextmanager
def _conv_output_into(rows: torch.Tensor) -> Iterator[None]:
    """While the block runs, causal-conv1d's forward writes its output straight into `rows` (a sequence's rows of the
    pack's output: the same kernel on the same input, only another address, so the same bits) instead of a tensor of
    its own that is then copied there (12 ms of device-to-device copies in an FP8 short-mix pack, H100). Swapped
    below transformers' binding and the kernel recorder, which still see the call; a causal-conv1d without those
    names runs as it is."""
    try:
        from causal_conv1d import causal_conv1d_interface as interface
        from causal_conv1d import cpp_functions
    except ImportError:
        yield
        return
    own, op = (
        getattr(interface, "causal_conv1d_fwd_function", None),
        getattr(cpp_functions, "_causal_conv1d_fwd_cpp", None),
    )
    if own is None or op is None:
        yield
        return

    def forward(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: Any,
        seq_idx: Any,
        initial_states: Any,
        final_states_out: Any,
        silu_activation: bool,
    ) -> torch.Tensor:
        if x.shape != rows.shape or x.dtype != rows.dtype or x.stride()[1:] != rows.stride()[1:]:
            return own(x, weight, bias, seq_idx, initial_states, final_states_out, silu_activation)
        op(
            x=x,
            weight=weight,
            bias=bias,
            seq_idx=seq_idx,
            initial_states=initial_states,
            out=rows,
            final_states_out=final_states_out,
            silu_activation=silu_activation,
        )
        return rows

    interface.causal_conv1d_fwd_function = forward
    try:
        yield
    finally:
        interface.causal_conv1d_fwd_function = own


def _rule(inner: Callable[..., Any], spans: Spans, part: Part) -> Callable[..., Any]:
    def rule(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, **kw: Any
    ) -> Any:
        kw.pop("cu_seqlens", None)
        out: torch.Tensor | None = None
        for start, end in spans:
            core, _ = inner(
                part(query, 1, start, end),
                part(key, 1, start, end),
                part(value, 1, start, end),
                g=part(g, 1, start, end),
                beta=part(beta, 1, start, end),
                **kw,
            )
            if out is None:
                out = core.new_empty((*value.shape[:2], *core.shape[2:]))
            out[:, start:end] = core
        return out, None

    return rule


def _varlen_rule(inner: Callable[..., Any], spans: Spans, shape: int) -> Callable[..., Any]:
    bounds = sorted({0, shape, *(edge for span in spans for edge in span)})
    cpu = torch.tensor(bounds, dtype=torch.long)
    staged = cpu.pin_memory() if torch.cuda.is_available() else cpu  # so its copy up never waits for the GPU
    on_device: dict[torch.device, torch.Tensor] = {}

    def rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kw: Any) -> Any:
        kw.pop("cu_seqlens", None)
        if query.device not in on_device:
            on_device[query.device] = staged.to(query.device, non_blocking=True)
        query, key, value = (contiguous(x) for x in (query, key, value))
        # cu_seqlens_cpu: fla builds its chunk index from the host copy, so no call waits for the GPU
        core, _ = inner(query, key, value, cu_seqlens=on_device[query.device], cu_seqlens_cpu=cpu, **kw)
        return core, None

    return rule


def contiguous(x: torch.Tensor) -> torch.Tensor:
    """`x` laid out contiguous, its bits moved 8 bytes at a time. q, k and v reach the rule as views of the conv's
    output, a row of all three apart; fla would make them contiguous with torch's strided copy a bfloat16 at a time:
    21 ms of an FP8 short-mix pack on the H100 (64 layers), 11 ms as int64 (1.014x on the pack; docs/measurements.md).
    A copy changes no value."""
    if x.is_contiguous():
        return x
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    try:
        wide = x.view(torch.int64)
    except RuntimeError:  # rows or offsets that are not a multiple of 8 bytes
        return out.copy_(x)
    out.view(torch.int64).copy_(wide)
    return out


class _Attention:
    """Stands in for transformers' attention registry: the interface it hands out runs each sequence alone."""

    def __init__(self, registry: Any, spans: Spans, part: Part) -> None:
        self.registry = registry
        self.spans = spans
        self.part = part

    def get_interface(self, name: str, default: Callable[..., Any]) -> Callable[..., Any]:
        inner = self.registry.get_interface(name, default)
        spans, part = self.spans, self.part
        masked = name == "eager"  # eager attention is causal only through its mask; sdpa's is_causal needs none

        def attention(
            module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, _mask: Any, **kw: Any
        ) -> Any:
            batch, heads, tokens, _ = query.shape
            out = query.new_empty((batch, tokens, heads, value.shape[-1]))
            for start, end in spans:
                mask = _causal(end - start, query) if masked else None
                found, _ = inner(
                    module, part(query, 2, start, end), part(key, 2, start, end), part(value, 2, start, end), mask, **kw
                )
                out[:, start:end] = found
            return out, None

        return attention


def _causal(tokens: int, like: torch.Tensor) -> torch.Tensor:
    blocked = torch.ones((tokens, tokens), dtype=torch.bool, device=like.device).triu(1)
    return torch.zeros((1, 1, tokens, tokens), dtype=like.dtype, device=like.device).masked_fill(
        blocked, torch.finfo(like.dtype).min
    )
