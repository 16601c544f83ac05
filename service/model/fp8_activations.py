"""The activations of an FP8 target as its block-scaled GEMM takes them: per token and 128 columns, scale = amax /
448, values / scale rounded to e4m3, the scales token-major, rows padded to a multiple of 4 (what cuBLAS wants). A
sequence's alone (`quantize_activations`) or every sequence's of a pack laid out as each one's alone
(`PackQuantization`). The torch chains here are the reference; `fp8_kernels` does each in one pass where Triton runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448


def scale_of(amax: torch.Tensor) -> torch.Tensor:
    """A block's float32 scale, amax / 448 by IEEE division (the bits `fp8_kernels` reproduces): divided by a
    tensor, not the scalar, because torch divides by a scalar on CUDA as a multiply by its reciprocal."""
    return (amax / torch.full_like(amax, FP8_MAX)).clamp(min=torch.finfo(torch.float32).tiny)


def padded_rows(m: int) -> int:
    """The rows the block-scaled GEMM runs for `m` tokens: cuBLAS wants a multiple of 4."""
    return m + -m % 4


def quantize_activations(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`rows` [M, K] as `Fp8Linear.scaled_mm` takes them: per token and 128 columns, padded to `padded_rows(M)`."""
    return _row_quantizer()(rows if rows.stride(-1) == 1 else rows.contiguous(), padded_rows(rows.shape[0]))


class PackQuantization:
    """Where each sequence of a pack keeps its quantized activations, laid out as `quantize_activations` lays out the
    sequence's own: its values in its rows of the pack's [P, K] e4m3, its padding rows in the filler after it, and its
    scales token-major in a block of their own, 512 bytes aligned as a fresh tensor is. `quantize` makes them for the
    whole pack at once (one launch for every sequence; each token's values and scales are computed from that token
    alone, so they are its sequence's own call's)."""

    ALIGN = 128  # rows of scales: a block starts 128 floats (512 bytes) from another whatever the width

    def __init__(self, spans: list[tuple[int, int]], tokens: int) -> None:
        self.tokens = tokens
        self.blocks: list[tuple[int, int, int, int]] = []  # (start, tokens, padded rows, its scale block's first row)
        plan = torch.full((tokens, 4), -1, dtype=torch.int32)
        base = 0
        self.fits = True
        for start, end in spans:
            padded = padded_rows(end - start)
            if start + padded > tokens or bool((plan[start : start + padded, 0] >= 0).any()):
                self.fits = False  # another sequence's rows (starts aligned to fewer than 4 tokens)
                break
            plan[start : start + padded] = torch.tensor([0, end - start, padded, base], dtype=torch.int32)
            plan[start : start + padded, 0] = torch.arange(padded, dtype=torch.int32)
            self.blocks.append((start, end - start, padded, base))
            base += padded + -padded % self.ALIGN
        self.scale_rows = base
        self._plan = plan
        self._on_device: dict[torch.device, torch.Tensor] = {}

    def plan(self, device: torch.device) -> torch.Tensor:
        """[P, 4] int32 per row: its row in its sequence's padded rows (-1: no sequence's), the sequence's tokens, its
        padded rows, and its scale block's first row; on `device`, copied up once."""
        if device not in self._on_device:
            staged = self._plan.pin_memory() if device.type == "cuda" else self._plan
            self._on_device[device] = staged.to(device, non_blocking=True)
        return self._on_device[device]

    def quantize(self, rows: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each sequence's (e4m3 [padded, K], float32 scales [padded, K / 128]) of the pack's `rows` [P, K], each
        as `quantize_activations` of its rows alone gives them: the same values, shapes and strides."""
        return self.parts(*_pack_quantizer()(rows if rows.stride(-1) == 1 else rows.contiguous(), self))

    def parts(self, quantized: torch.Tensor, scales: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each sequence's views of a pack's e4m3 [P, K] and flat scales [scale_rows * K / 128]."""
        groups = quantized.shape[1] // 128
        return [
            (
                quantized[start : start + padded],
                scales[base * groups : (base + padded) * groups].view(groups, padded).t(),
            )
            for start, _, padded, base in self.blocks
        ]


def quantize_pack(rows: torch.Tensor, layout: PackQuantization) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch chain's `PackQuantization.quantize`, a sequence at a time (where Triton is missing): (e4m3 [P, K],
    float32 scales [scale_rows * K / 128])."""
    quantized = torch.empty(rows.shape, dtype=FP8, device=rows.device)
    scales = torch.empty(layout.scale_rows * (rows.shape[1] // 128), dtype=torch.float32, device=rows.device)
    for (start, tokens, padded, _), (values, block) in zip(layout.blocks, layout.parts(quantized, scales), strict=True):
        alone_values, alone_scales = quantize_rows(rows[start : start + tokens], padded)
        values.copy_(alone_values)
        block.copy_(alone_scales)
    return quantized, scales


def quantize_rows(rows: torch.Tensor, padded: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The activations as the block-scaled GEMM takes them: (e4m3 [padded, K], float32 scales [padded, K / 128]
    token-major), per token and 128 columns scale = amax / 448; rows past M zero with scale 1 (cuBLAS wants a
    multiple of 4 tokens). The reference `fp8_kernels.quantize_rows` reproduces in one pass."""
    m, k = rows.shape
    grouped = F.pad(rows, (0, 0, 0, padded - m)).float().view(padded, k // 128, 128)
    scale = scale_of(grouped.abs().amax(dim=-1))
    if padded > m:
        scale[m:] = 1.0
    return (grouped / scale[..., None]).to(FP8).view(padded, k), scale.t().contiguous().t()


@functools.cache
def _row_quantizer() -> Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]:
    """Triton's one-pass kernel where Triton is installed (always, beside a CUDA build of torch), else the chain."""
    try:
        from service.model import fp8_kernels
    except ImportError:
        return quantize_rows
    return fp8_kernels.quantize_rows


@functools.cache
def _pack_quantizer() -> Callable[[torch.Tensor, PackQuantization], tuple[torch.Tensor, torch.Tensor]]:
    """Triton's one launch for the pack where Triton is installed, else the chain a sequence at a time."""
    try:
        from service.model import fp8_kernels
    except ImportError:
        return quantize_pack
    return lambda rows, layout: fp8_kernels.quantize_pack(rows, layout.plan(rows.device), layout.scale_rows)
