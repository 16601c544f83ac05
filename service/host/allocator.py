"""The C heap of a long-running service process, bounded.

Under steady extraction and reads together, glibc's malloc kept memory the process had freed: a server grew ~60 MiB a
minute on the soak (benchmarks/soak.py; docs/measurements.md) and had not levelled off at 2 GiB, while extraction
alone or reads alone stayed flat. Two of glibc's defaults make it so. Its mmap threshold is dynamic: once a block
mapped on its own (a read's chunk bytes, a forward's activations, anything over 128 KiB) is freed, the threshold rises
to that block's size (up to 32 MiB), so later blocks of that size come from the heap instead, where the small
allocations of other requests pin them and they are never given back. And each thread that allocates may get an arena
of its own (up to 8 per core), each holding such pages; the service's threads are many (uvicorn's pool, the writers,
the extraction thread). Fixing the threshold where glibc starts it keeps large blocks mapped, so freeing one gives it
back; a few arenas bound what the rest can hold.

`bound_heap` sets both with `mallopt` (glibc's own settings, the same as MALLOC_MMAP_THRESHOLD_ and MALLOC_ARENA_MAX
in the environment) before the service starts its threads; elsewhere (musl, macOS) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Literal

log = logging.getLogger("hsstore.allocator")

# mallopt's parameter numbers (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

HeapBound = Literal["bounded", "not-glibc", "unchanged"]


def _glibc_mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]  # ctypes' function type is private
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018  only glibc has it: musl's mallopt ignores these parameters
    except (OSError, AttributeError):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def bound_heap(mmap_threshold: int | None, arena_max: int | None) -> HeapBound:
    """Fix glibc's mmap threshold at `mmap_threshold` bytes and allow at most `arena_max` arenas (None: glibc's
    default for that one). What was done, for the startup log."""
    if mmap_threshold is None and arena_max is None:
        return "unchanged"
    mallopt = _glibc_mallopt()
    if mallopt is None:
        log.info("the C library is not glibc: its heap is left as it is")
        return "not-glibc"
    for parameter, value in ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_ARENA_MAX, arena_max)):
        if value is not None and mallopt(parameter, value) != 1:
            raise ValueError(f"glibc refused mallopt({parameter}, {value})")
    return "bounded"
