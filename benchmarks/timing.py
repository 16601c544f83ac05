"""Timing shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Best of `repeats` runs (the machine is shared and noisy; the best run is the one least disturbed)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def gpu_ms_per_call(fn: Callable[[], object], repeats: int = 20) -> float:
    """Milliseconds per call of `fn` on the GPU, after one call that warms it: synchronised before and after, so
    launches count where the host sets the pace."""
    import torch

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1000
