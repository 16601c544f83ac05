"""Row strides of the views the fused kernels read in place (shared by the kernels and the modules that call them)."""

from __future__ import annotations

import torch


def row_stride(x: torch.Tensor) -> int | None:
    """The distance between consecutive rows (last-dimension vectors) of `x` when they are evenly spaced, do not
    overlap and each is contiguous; None otherwise. The query norm's input is such a view: every other half-row."""
    if x.dim() == 0 or (x.shape[-1] > 1 and x.stride(-1) != 1):
        return None
    step: int | None = None
    expected = 0
    for size, stride in zip(reversed(x.shape[:-1]), reversed(x.stride()[:-1]), strict=True):
        if size == 1:
            continue
        if step is None:
            step, expected = stride, stride * size
        elif stride != expected:
            return None
        else:
            expected *= size
    if step is None:
        return x.shape[-1]
    return step if step >= x.shape[-1] else None
