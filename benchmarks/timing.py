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
