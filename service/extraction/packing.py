"""Packed forwards of one fixed token shape, whose bits do not depend on the neighbours.

Many sequences share one forward of exactly `tokens` positions (the rest is filler), so every GEMM, norm and
activation always runs at the same shape and a row's bits cannot depend on what else is in the pack: those kernels
compute each row from that row alone. The parts that mix tokens run per sequence, on that sequence's rows only, so
their shapes are the sequence's own wherever it sits: the causal conv and the gated delta rule of every
Gated-DeltaNet layer (whatever kernels the backend binds), and full attention (causal, positions restarting at 0).
A sequence longer than `tokens` runs alone in the next multiple of it. Sequence starts are aligned to `align`
tokens (fla's chunk), so no kernel sees a start its tiling would treat differently.

Which pack a sample lands in, and where, then changes nothing: the audit re-extracts it alone in a pack and gets the
same bits (tested on the GPU for every backend, at other offsets and with other neighbours; on the CPU with other
neighbours at one offset, the property a CPU's kernels must have whatever the host).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

# What the modeling module calls for the parts that mix tokens: swapped for per-sequence versions during a pack
CONV, RULE, ATTENTION = "causal_conv1d_fn", "torch_chunk_gated_delta_rule", "ALL_ATTENTION_FUNCTIONS"


@dataclass(frozen=True, slots=True)
class PackPolicy:
    tokens: int
    align: int = 64

    def describe(self) -> str:
        return (
            f"fixed-shape packs of {self.tokens} tokens, starts aligned to {self.align} "
            "(a longer sequence alone in the next multiple; token mixing per sequence, fla's rule over cu_seqlens)"
        )

    @classmethod
    def parse(cls, described: str) -> PackPolicy | None:
        """The policy a fingerprint names, if it is a packed one (what the audit re-extracts under)."""
        found = re.fullmatch(r"fixed-shape packs of (\d+) tokens, starts aligned to (\d+) .*", described)
        return cls(int(found[1]), int(found[2])) if found else None


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
        if n > policy.tokens:
            alone.append(Pack(_round_up(n, policy.tokens), (Segment(index, 0, n),)))
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
def per_sequence(module: ModuleType, pack: Pack, varlen_rule: bool) -> Iterator[None]:
    """While the block runs, the modeling module's token-mixing calls run once per sequence of `pack` (through
    whatever is bound there now: the kernel recorder of the backend that runs) and leave the filler at zero. With
    `varlen_rule` (fla's delta rule is bound), the rule runs once per layer over the whole pack with fla's
    `cu_seqlens`, each sequence (and each stretch of filler, then computed like one) a sequence of its own:
    per-sequence calls cost ~1 ms of CPU each there, and fla computes every sequence's chunks from its own start.
    Filler rows never reach a real one: every other kernel is row-wise."""
    spans = [(s.start, s.start + s.length) for s in pack.segments]
    saved = {name: getattr(module, name) for name in (CONV, RULE, ATTENTION)}
    setattr(module, CONV, _conv(saved[CONV], spans))
    rule = _varlen_rule(saved[RULE], spans, pack.shape) if varlen_rule else _rule(saved[RULE], spans)
    setattr(module, RULE, rule)
    setattr(module, ATTENTION, _Attention(saved[ATTENTION], spans))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _conv(inner: Callable[..., torch.Tensor], spans: list[tuple[int, int]]) -> Callable[..., torch.Tensor]:
    def conv(x: torch.Tensor, weight: torch.Tensor, bias: Any = None, activation: Any = None, **_: Any) -> Any:
        out = torch.zeros_like(x)  # [B, C, T], the input's strides (channel-last, as the layer makes it)
        for start, end in spans:
            out[:, :, start:end] = inner(x[:, :, start:end], weight, bias, activation=activation)
        return out

    return conv


def _rule(inner: Callable[..., Any], spans: list[tuple[int, int]]) -> Callable[..., Any]:
    def rule(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, **kw: Any
    ) -> Any:
        kw.pop("cu_seqlens", None)
        out: torch.Tensor | None = None
        for start, end in spans:
            core, _ = inner(
                query[:, start:end],
                key[:, start:end],
                value[:, start:end],
                g=g[:, start:end],
                beta=beta[:, start:end],
                **kw,
            )
            if out is None:
                out = core.new_zeros((*value.shape[:2], *core.shape[2:]))
            out[:, start:end] = core
        return out, None

    return rule


def _varlen_rule(inner: Callable[..., Any], spans: list[tuple[int, int]], shape: int) -> Callable[..., Any]:
    bounds = sorted({0, shape, *(edge for span in spans for edge in span)})
    cpu = torch.tensor(bounds, dtype=torch.long)
    staged = cpu.pin_memory() if torch.cuda.is_available() else cpu  # so its copy up never waits for the GPU
    on_device: dict[torch.device, torch.Tensor] = {}

    def rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kw: Any) -> Any:
        kw.pop("cu_seqlens", None)
        if query.device not in on_device:
            on_device[query.device] = staged.to(query.device, non_blocking=True)
        # cu_seqlens_cpu: fla builds its chunk index from the host copy, so no call waits for the GPU
        core, _ = inner(query, key, value, cu_seqlens=on_device[query.device], cu_seqlens_cpu=cpu, **kw)
        return core, None

    return rule


class _Attention:
    """Stands in for transformers' attention registry: the interface it hands out runs each sequence alone."""

    def __init__(self, registry: Any, spans: list[tuple[int, int]]) -> None:
        self.registry = registry
        self.spans = spans

    def get_interface(self, name: str, default: Callable[..., Any]) -> Callable[..., Any]:
        inner = self.registry.get_interface(name, default)
        spans = self.spans
        masked = name == "eager"  # eager attention is causal only through its mask; sdpa's is_causal needs none

        def attention(
            module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, _mask: Any, **kw: Any
        ) -> Any:
            batch, heads, tokens, _ = query.shape
            out = query.new_zeros((batch, tokens, heads, value.shape[-1]))
            for start, end in spans:
                mask = _causal(end - start, query) if masked else None
                part, _ = inner(
                    module, query[:, :, start:end], key[:, :, start:end], value[:, :, start:end], mask, **kw
                )
                out[:, start:end] = part
            return out, None

        return attention


def _causal(tokens: int, like: torch.Tensor) -> torch.Tensor:
    blocked = torch.ones((tokens, tokens), dtype=torch.bool, device=like.device).triu(1)
    return torch.zeros((1, 1, tokens, tokens), dtype=like.dtype, device=like.device).masked_fill(
        blocked, torch.finfo(like.dtype).min
    )
