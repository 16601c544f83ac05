"""The fp8 featureset's numbers: float8 e4m3 values with one float32 scale per token and layer.

A row (one token of one layer, H values) is multiplied by 1 / scale and rounded to nearest even, where the scale is
the smallest power of two that brings the row's absmax within e4m3's largest finite value, 448 (as MX formats
scale). A power of two makes the scaling exact, so the one rounding is the cast, and every device gives the same
bits (a scale of absmax / 448 did not: CUDA divides by a scalar as a multiply by its reciprocal). Per value the
error is that of e4m3's 3 mantissa bits, at most 2^-4 relative. Dequantising multiplies back (exact) and rounds once
to bfloat16. The service quantises, readers dequantise, both through these two functions.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def quantise(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[T, L, H] (any float dtype) -> (float8_e4m3fn [T, L, H], float32 scales [T, L]). A row of zeros gets scale 1."""
    values = hidden.float()
    absmax = values.abs().amax(dim=-1)
    # absmax = m * 2^e, m in [0.5, 1): absmax / 2^k <= 448 = 0.875 * 2^9 for k = e - 9 when m <= 0.875, else e - 8
    mantissa, exponent = torch.frexp(absmax)
    power = exponent - 9 + (mantissa > 0.875).to(exponent.dtype)
    ones = torch.ones_like(absmax)
    scales = torch.where(absmax > 0, torch.ldexp(ones, power), ones)
    inverse = torch.where(absmax > 0, torch.ldexp(ones, -power), ones)
    quantised = (values * inverse.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return quantised, scales


def dequantise(quantised: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """(float8_e4m3fn [T, L, H], float32 [T, L]) -> [T, L, H] in `dtype` (bfloat16 unless asked)."""
    return (quantised.float() * scales.unsqueeze(-1)).to(dtype)
