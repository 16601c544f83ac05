"""Triton kernels that redo, in one pass over memory, what the qwen3_5 modules' eager elementwise chains do in many.

Each kernel repeats its eager chain's float32 arithmetic operation for operation, with the same roundings (IEEE
add, multiply and divide, round-to-nearest-even to bfloat16, `expf`, `rsqrtf`), so the output bits are the eager
ones. The norms' one reduction, the mean of squares, is either torch's own kernel on the float32 squares (`square`,
then a tail) or, in `rms_norm` and `gated_norm`, redone in a single pass with the additions in the order torch's
CUDA mean makes them once a launch holds 16 rows or more (`_sum_of_squares`): that order is what fixes the bits.
Contraction into fused multiply-adds is off for the same reason.

Imported only where Triton and a CUDA device exist; `fused.py` decides whether to use these at all and proves them
bit-equal on the device before it does.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from service.model.strides import row_stride

BLOCK = 2048
ROTARY_ROWS = 16  # rows of q or k a program rotates
SMALLEST_NORMAL = tl.constexpr(1.1754943508222875e-38)  # below it the divide's operand is subnormal: see _silu


@triton.jit
def _silu(x):
    """torch's silu on float32: x / (1 + expf(-x)). Triton's libdevice runs flush-to-zero, so a subnormal x would
    come out 0; eager gives x / 2 there (expf(-x) = 1), which one exact multiply by 0.5 rounds the same way."""
    silu = tl.math.div_rn(x, 1.0 + libdevice.exp(-x))
    return tl.where(tl.abs(x) < SMALLEST_NORMAL, x * 0.5, silu)


@triton.jit
def _inv_rms(variance, eps):
    """torch.rsqrt(variance + eps) on float32: an IEEE add, then rsqrtf (flush-to-zero only matters below the
    smallest normal, which `variance + eps` never is for the norms' eps; the device check proves it)."""
    return libdevice.rsqrt(variance + eps)


@triton.jit
def _inv_rms_kernel(variance_ptr, out_ptr, eps, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, _inv_rms(tl.load(variance_ptr + offsets, mask=mask), eps), mask=mask)


@triton.jit
def _source(offsets, cols, row_stride, STRIDED: tl.constexpr):
    """Where element `offsets` of the contiguous output reads its input: rows `row_stride` apart when STRIDED (the
    query norm's input is every other half-row of q_proj's output)."""
    if STRIDED:
        return (offsets // cols) * row_stride + offsets % cols
    return offsets


@triton.jit
def _square_kernel(x_ptr, out_ptr, n, cols, row_stride, STRIDED: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + _source(offsets, cols, row_stride, STRIDED), mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, x * x, mask=mask)


@triton.jit
def _rms_tail_kernel(
    x_ptr, variance_ptr, eps, scale_ptr, out_ptr, n, cols, row_stride, STRIDED: tl.constexpr, BLOCK: tl.constexpr
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + _source(offsets, cols, row_stride, STRIDED), mask=mask).to(tl.float32)
    r = _inv_rms(tl.load(variance_ptr + offsets // cols, mask=mask), eps)
    scale = tl.load(scale_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + offsets, ((x * r) * scale).to(tl.bfloat16), mask=mask)


@triton.jit
def _silu_mul_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    gate = tl.load(gate_ptr + offsets, mask=mask).to(tl.float32)
    up = tl.load(up_ptr + offsets, mask=mask).to(tl.float32)
    activated = _silu(gate).to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + offsets, (activated * up).to(tl.bfloat16), mask=mask)


@triton.jit
def _gated_tail_kernel(x_ptr, variance_ptr, eps, weight_ptr, gate_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    r = _inv_rms(tl.load(variance_ptr + offsets // cols, mask=mask), eps)
    weight = tl.load(weight_ptr + offsets % cols, mask=mask).to(tl.float32)
    gate = tl.load(gate_ptr + offsets, mask=mask).to(tl.float32)
    normed = (x * r).to(tl.bfloat16).to(tl.float32)
    weighted = (weight * normed).to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + offsets, (weighted * _silu(gate)).to(tl.bfloat16), mask=mask)


@triton.jit
def _sum_of_squares(x_ptr, rows, real, row_stride, COLS: tl.constexpr, ROWS: tl.constexpr):
    """Each row's sum of float32(x) ** 2, added in the order torch's CUDA mean over the last axis adds a contiguous
    float32 row of a multiple of 128 columns when its launch holds at least 16 rows (Reduce.cuh, torch 2.11: blocks
    of 32 x 16 threads, one warp per row, loads of 4 floats): lane l keeps four running sums from zero, sum i adding
    column 128 j + 4 l + i in order of j; the lane adds its four left to right; then the lanes add in pairs 16
    apart, then 8, 4, 2 and 1 apart (shuffles down), lane 0 holding the row's sum."""
    columns = tl.arange(0, 128)
    sums = tl.zeros((ROWS, 128), dtype=tl.float32)
    for j in range(0, COLS // 128):
        x = tl.load(x_ptr + rows[:, None] * row_stride + j * 128 + columns[None, :], mask=real[:, None], other=0.0)
        x = x.to(tl.float32)
        sums = sums + x * x
    even, odd = tl.split(tl.reshape(sums, (ROWS, 32, 2, 2)))  # column 4 l + 2 p + q: q = 0 even, 1 odd
    s0, s2 = tl.split(even)
    s1, s3 = tl.split(odd)
    lanes = ((s0 + s1) + s2) + s3
    lanes = tl.sum(tl.reshape(lanes, (ROWS, 2, 16)), axis=1)  # each axis of 2 is one add: lane k + lane k + 16
    lanes = tl.sum(tl.reshape(lanes, (ROWS, 2, 8)), axis=1)
    lanes = tl.sum(tl.reshape(lanes, (ROWS, 2, 4)), axis=1)
    lanes = tl.sum(tl.reshape(lanes, (ROWS, 2, 2)), axis=1)
    return tl.sum(lanes, axis=1)


@triton.jit
def _rms_norm_kernel(
    x_ptr, scale_ptr, out_ptr, eps, factor, n_rows, row_stride, COLS: tl.constexpr, ROWS: tl.constexpr
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    real = rows < n_rows
    r = _inv_rms(_sum_of_squares(x_ptr, rows, real, row_stride, COLS, ROWS) * factor, eps)[:, None]
    columns = tl.arange(0, 128)
    for j in range(0, COLS // 128):
        x = tl.load(x_ptr + rows[:, None] * row_stride + j * 128 + columns[None, :], mask=real[:, None], other=0.0)
        scale = tl.load(scale_ptr + j * 128 + columns)[None, :]
        out = ((x.to(tl.float32) * r) * scale).to(tl.bfloat16)
        tl.store(out_ptr + rows[:, None] * COLS + j * 128 + columns[None, :], out, mask=real[:, None])


@triton.jit
def _gated_norm_kernel(
    x_ptr, gate_ptr, weight_ptr, out_ptr, eps, factor, n_rows, COLS: tl.constexpr, ROWS: tl.constexpr
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    real = rows < n_rows
    r = _inv_rms(_sum_of_squares(x_ptr, rows, real, COLS, COLS, ROWS) * factor, eps)[:, None]
    columns = tl.arange(0, 128)
    for j in range(0, COLS // 128):
        at = rows[:, None] * COLS + j * 128 + columns[None, :]
        x = tl.load(x_ptr + at, mask=real[:, None], other=0.0).to(tl.float32)
        gate = tl.load(gate_ptr + at, mask=real[:, None], other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + j * 128 + columns).to(tl.float32)[None, :]
        normed = (x * r).to(tl.bfloat16).to(tl.float32)
        weighted = (weight * normed).to(tl.bfloat16).to(tl.float32)
        tl.store(out_ptr + at, (weighted * _silu(gate)).to(tl.bfloat16), mask=real[:, None])


@triton.jit
def _rotary_kernel(
    x_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    n_rows,
    heads,
    tokens,
    batch_stride,
    head_stride,
    token_stride,
    trig_batch_stride,
    trig_token_stride,
    COLS: tl.constexpr,
    ROTARY: tl.constexpr,
    ROWS: tl.constexpr,
):
    """Rows of x [B, H, T, COLS] (last axis contiguous) rotated in their first ROTARY columns, the rest copied, into
    a contiguous out: bfloat16(bfloat16(x * cos) + bfloat16(rotate_half(x) * sin)), rotate_half(x) = (-x2, x1)."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    real = rows < n_rows
    b, h, t = rows // (heads * tokens), rows // tokens % heads, rows % tokens
    source = (b * batch_stride + h * head_stride + t * token_stride)[:, None]
    trig = (b * trig_batch_stride + t * trig_token_stride)[:, None]
    columns = tl.arange(0, ROTARY)[None, :]
    half: tl.constexpr = ROTARY // 2
    partner = tl.where(columns < half, columns + half, columns - half)
    x = tl.load(x_ptr + source + columns, mask=real[:, None]).to(tl.float32)
    turned = tl.load(x_ptr + source + partner, mask=real[:, None]).to(tl.float32)
    turned = tl.where(columns < half, -turned, turned)
    cos = tl.load(cos_ptr + trig + columns, mask=real[:, None]).to(tl.float32)
    sin = tl.load(sin_ptr + trig + columns, mask=real[:, None]).to(tl.float32)
    rotated = (x * cos).to(tl.bfloat16).to(tl.float32) + (turned * sin).to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * COLS + columns, rotated.to(tl.bfloat16), mask=real[:, None])
    if COLS > ROTARY:
        rest = tl.arange(0, COLS)[None, :]  # the columns past ROTARY, copied as they are
        passed = real[:, None] & (rest >= ROTARY)
        tl.store(out_ptr + rows[:, None] * COLS + rest, tl.load(x_ptr + source + rest, mask=passed), mask=passed)


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(n, BLOCK),)


def inv_rms(variance: torch.Tensor, eps: float) -> torch.Tensor:
    """torch.rsqrt(variance + eps), as the tails compute it (for the device check)."""
    out = torch.empty_like(variance)
    n = variance.numel()
    _inv_rms_kernel[_grid(n)](variance, out, eps, n, BLOCK=BLOCK, enable_fp_fusion=False)
    return out


def _layout(x: torch.Tensor) -> dict[str, int | bool]:
    cols, stride = x.shape[-1], row_stride(x)
    if stride is None:
        raise ValueError("x's rows must be evenly spaced with a contiguous last dimension")
    return {"cols": cols, "row_stride": stride, "STRIDED": stride != cols}


def square(x: torch.Tensor) -> torch.Tensor:
    """float32(x) ** 2, contiguous, as `x.float().pow(2)` computes it; x's rows may be evenly spaced apart."""
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _square_kernel[_grid(x.numel())](x, out, x.numel(), **_layout(x), BLOCK=BLOCK, enable_fp_fusion=False)
    return out


def rms_tail(x: torch.Tensor, variance: torch.Tensor, eps: float, scale: torch.Tensor) -> torch.Tensor:
    """bfloat16((float32(x) * rsqrt(variance + eps)) * scale), contiguous; `variance` one float32 per row, `scale`
    one per column; x's rows may be evenly spaced apart."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    _rms_tail_kernel[_grid(n)](x, variance, eps, scale, out, n, **_layout(x), BLOCK=BLOCK, enable_fp_fusion=False)
    return out


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """bfloat16(bfloat16(silu(gate)) * up): the MLP's `act_fn(gate_proj(x)) * up_proj(x)`."""
    out = torch.empty_like(gate)
    _silu_mul_kernel[_grid(gate.numel())](gate, up, out, gate.numel(), BLOCK=BLOCK, enable_fp_fusion=False)
    return out


def gated_tail(
    x: torch.Tensor, variance: torch.Tensor, eps: float, weight: torch.Tensor, gate: torch.Tensor
) -> torch.Tensor:
    """The gated RMSNorm after its mean: bfloat16(bfloat16(weight * bfloat16(x * rsqrt(variance + eps))) *
    silu(float32(gate)))."""
    out = torch.empty_like(x)
    n = x.numel()
    _gated_tail_kernel[_grid(n)](
        x, variance, eps, weight, gate, out, n, x.shape[-1], BLOCK=BLOCK, enable_fp_fusion=False
    )
    return out


def mean_factor(rows: int, cols: int) -> float:
    """What torch's CUDA mean multiplies a sum by: float32(rows) / float32(rows * cols) (ReduceMomentKernel.cu)."""
    return float(np.float32(rows) / np.float32(rows * cols))


def _row_launch(x: torch.Tensor) -> tuple[int, int, tuple[int]]:
    """(rows, rows per program, grid) of a row-wise norm over `x`'s rows: about 2,048 values a load."""
    rows = x.numel() // x.shape[-1]
    per_program = min(64, max(16, 8192 // x.shape[-1]))
    return rows, per_program, (triton.cdiv(rows, per_program),)


def row_wise(x: torch.Tensor) -> bool:
    """Whether `rms_norm` and `gated_norm` take `x`'s means in one pass: rows of a multiple of 128 columns (else
    torch's mean adds a row's tail apart, and they run its two passes)."""
    return x.shape[-1] % 128 == 0


def rms_norm(x: torch.Tensor, eps: float, scale: torch.Tensor) -> torch.Tensor:
    """The RMSNorm of every row of `x` in one pass: `rms_tail(x, mean(square(x)), eps, scale)` as that chain gives
    it when torch's mean runs over 16 rows or more; x's rows may be evenly spaced apart."""
    if not row_wise(x):
        return rms_tail(x, square(x).mean(-1, keepdim=True), eps, scale)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    cols = x.shape[-1]
    rows, per_program, grid = _row_launch(x)
    stride = _layout(x)["row_stride"]
    factor = mean_factor(rows, cols)
    _rms_norm_kernel[grid](
        x, scale, out, eps, factor, rows, stride, COLS=cols, ROWS=per_program, enable_fp_fusion=False
    )
    return out


def gated_norm(x: torch.Tensor, eps: float, weight: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """The gated RMSNorm of every row of a contiguous `x` in one pass: `gated_tail(x, mean(square(x)), eps,
    weight, gate)` as that chain gives it when torch's mean runs over 16 rows or more."""
    if not row_wise(x):
        return gated_tail(x, square(x).mean(-1, keepdim=True), eps, weight, gate)
    out = torch.empty_like(x)
    cols = x.shape[-1]
    rows, per_program, grid = _row_launch(x)
    factor = mean_factor(rows, cols)
    _gated_norm_kernel[grid](
        x, gate, weight, out, eps, factor, rows, COLS=cols, ROWS=per_program, enable_fp_fusion=False
    )
    return out


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' rotary embedding of q or k [B, H, T, D] (any strides, the last axis contiguous) by cos and sin
    [B or 1, T, R] (equal strides, the last axis contiguous; R <= D, both powers of two): `cat([(x_r * cos) +
    (rotate_half(x_r) * sin), x_pass], -1)`, contiguous as that cat makes it, each multiply and the add rounded to
    bfloat16 as the eager ops round them."""
    batch, heads, tokens, cols = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_rows = batch * heads * tokens
    trig_batch_stride = cos.stride(0) if cos.shape[0] > 1 else 0  # one cos for every batch row: broadcast
    _rotary_kernel[(triton.cdiv(n_rows, ROTARY_ROWS),)](
        x,
        cos,
        sin,
        out,
        n_rows,
        heads,
        tokens,
        x.stride(0),
        x.stride(1),
        x.stride(2),
        trig_batch_stride,
        cos.stride(1),
        COLS=cols,
        ROTARY=cos.shape[-1],
        ROWS=ROTARY_ROWS,
        enable_fp_fusion=False,
    )
    return out
