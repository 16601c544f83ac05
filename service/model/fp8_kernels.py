"""The activations' FP8 quantization for `Fp8Linear`'s block-scaled GEMM in one pass over memory: per token and
128 columns, scale = amax / 448, values / scale rounded to e4m3, the scales written token-major as cuBLAS reads them.
The torch chain it replaces (`fp8_activations.quantize_rows`) reads and writes a float32 copy of the activations five
times, which cost the FP8 GEMM all it saved. The divides are IEEE (`div_rn`) and the conversion rounds to nearest
even as torch's does, so the bits are the torch chain's (a GPU test holds it).

Imported only where Triton and a CUDA device exist.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

GROUPS = 8  # 128-column groups per program
PACK_ROWS, PACK_GROUPS = 8, 4  # a pack's rows and groups per program (1 row: one row of GROUPS a program)
SMALLEST_NORMAL = tl.constexpr(1.1754943508222875e-38)


@triton.jit
def _quantize_row(
    x_ptr, q_ptr, scale_ptr, row, real, scale_stride, groups, x_stride, GROUPS: tl.constexpr, FP8_MAX: tl.constexpr
):
    """Row `row` of x (zeros with scale 1 where not `real`, a padding row) into row `row` of q, its scales
    `scale_stride` apart from `scale_ptr`: one token, GROUPS groups of 128 columns from this program's first."""
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    columns = group[:, None] * 128 + tl.arange(0, 128)[None, :]
    inside = (group < groups)[:, None]
    x = tl.load(x_ptr + row * x_stride + columns, mask=inside & real, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=1), FP8_MAX), SMALLEST_NORMAL)
    scale = tl.where(real, scale, 1.0)
    q = tl.math.div_rn(x, scale[:, None])
    tl.store(q_ptr + row * (groups * 128) + columns, q.to(tl.float8e4nv), mask=inside)
    tl.store(scale_ptr + group * scale_stride, scale, mask=group < groups)


@triton.jit
def _quantize_kernel(x_ptr, q_ptr, scale_ptr, m, rows, groups, x_stride, GROUPS: tl.constexpr, FP8_MAX: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    _quantize_row(x_ptr, q_ptr, scale_ptr + row, row, row < m, rows, groups, x_stride, GROUPS, FP8_MAX)


@triton.jit
def _quantize_pack_kernel(
    x_ptr, q_ptr, scale_ptr, plan_ptr, groups, x_stride, GROUPS: tl.constexpr, FP8_MAX: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    local = tl.load(plan_ptr + row * 4)  # the row within its sequence's padded rows; -1: no sequence's
    if local < 0:
        return
    tokens = tl.load(plan_ptr + row * 4 + 1)
    padded = tl.load(plan_ptr + row * 4 + 2).to(tl.int64)
    block = tl.load(plan_ptr + row * 4 + 3).to(tl.int64) * groups  # where the sequence's scales begin
    scales = scale_ptr + block + local
    _quantize_row(x_ptr, q_ptr, scales, row, local < tokens, padded, groups, x_stride, GROUPS, FP8_MAX)


@triton.jit
def _quantize_pack_rows_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    plan_ptr,
    p,
    groups,
    x_stride,
    ROWS: tl.constexpr,
    GROUPS: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """`_quantize_pack_kernel` for ROWS rows a program: a sequence's consecutive rows keep their scales of one group
    side by side (token-major), so a program writes them together instead of 4 bytes `padded` apart each. The same
    arithmetic for every element (an exact max, IEEE divides), so the same bits."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    inside = rows < p
    local = tl.load(plan_ptr + rows * 4, mask=inside, other=-1)  # the row within its sequence's padded rows; -1: none
    tokens = tl.load(plan_ptr + rows * 4 + 1, mask=inside, other=0)
    padded = tl.load(plan_ptr + rows * 4 + 2, mask=inside, other=0).to(tl.int64)
    block = tl.load(plan_ptr + rows * 4 + 3, mask=inside, other=0).to(tl.int64) * groups
    kept = local >= 0
    real = kept & (local < tokens)  # else a padding row: zeros with scale 1
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    in_row = group < groups
    columns = (group[:, None] * 128 + tl.arange(0, 128)[None, :])[None, :, :]
    at = rows[:, None, None] * x_stride + columns
    x = tl.load(x_ptr + at, mask=real[:, None, None] & in_row[None, :, None], other=0.0).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=2), FP8_MAX), SMALLEST_NORMAL)
    scale = tl.where(real[:, None], scale, 1.0)
    q = tl.math.div_rn(x, scale[:, :, None])
    written = kept[:, None, None] & in_row[None, :, None]
    tl.store(q_ptr + rows[:, None, None] * (groups * 128) + columns, q.to(tl.float8e4nv), mask=written)
    scales_at = block[:, None] + group[None, :].to(tl.int64) * padded[:, None] + local[:, None]
    tl.store(scale_ptr + scales_at, scale, mask=kept[:, None] & in_row[None, :])


def quantize_rows(rows: torch.Tensor, padded: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [padded, K], float32 scales [padded, K / 128] token-major) of `rows` [M, K]; the rows past M are zero
    with scale 1 (cuBLAS wants a multiple of 4 tokens)."""
    m, k = rows.shape
    groups = k // 128
    quantized = torch.empty(padded, k, dtype=torch.float8_e4m3fn, device=rows.device)
    scales = torch.empty(groups, padded, dtype=torch.float32, device=rows.device)
    # the padding rows in the same launch: a pack runs this per sequence per layer, and launches are what it waits on
    _quantize_kernel[(padded, triton.cdiv(groups, GROUPS))](
        rows, quantized, scales, m, padded, groups, rows.stride(0), GROUPS=GROUPS, FP8_MAX=448.0
    )
    return quantized, scales.t()


def quantize_pack(rows: torch.Tensor, plan: torch.Tensor, scale_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize_rows` for every sequence of a pack in one launch: `rows` [P, K] the pack's, `plan` [P, 4] int32 per
    row (its row in its sequence's padded rows or -1, the sequence's tokens, padded rows and where its scale block
    begins, in rows of scales: `fp8_activations.PackQuantization`). Each sequence's rows land in its rows of the
    e4m3 [P, K] (its padding rows in the filler after it), its scales token-major in a block of their own of the
    float32 [scale_rows * K / 128]; rows of no sequence are left unwritten."""
    p, k = rows.shape
    groups = k // 128
    quantized = torch.empty(p, k, dtype=torch.float8_e4m3fn, device=rows.device)
    scales = torch.empty(scale_rows * groups, dtype=torch.float32, device=rows.device)
    if PACK_ROWS > 1:
        _quantize_pack_rows_kernel[(triton.cdiv(p, PACK_ROWS), triton.cdiv(groups, PACK_GROUPS))](
            rows, quantized, scales, plan, p, groups, rows.stride(0), ROWS=PACK_ROWS, GROUPS=PACK_GROUPS, FP8_MAX=448.0
        )
    else:
        _quantize_pack_kernel[(p, triton.cdiv(groups, GROUPS))](
            rows, quantized, scales, plan, groups, rows.stride(0), GROUPS=GROUPS, FP8_MAX=448.0
        )
    return quantized, scales
