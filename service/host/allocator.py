"""The C heap of a process that extracts, bounded.

Under steady extraction and reads together, glibc's malloc kept memory the process had freed: a server grew by a fifth
in a minute of the soak (benchmarks/soak.py; docs/measurements.md, "A day of load") and had not levelled off at 2 GiB
after five, while extraction alone or reads alone stayed level. Two of glibc's defaults make it so. Its mmap
threshold is dynamic: once a block mapped on its own (anything over 128 KiB) is freed, the threshold rises to that
block's size (up to 32 MiB), so later blocks of that size come from the heap instead, where the small allocations of
other requests pin them. And each thread that allocates may get an arena of its own (up to 8 per core), each holding
such pages; a service's threads are many (uvicorn's pool, the writers, the extracting thread). Fixing the threshold
where glibc starts it keeps large blocks mapped, so freeing one gives it back; two arenas bound what the rest can
hold. Giving free pages back on a timer (`malloc_trim`) did not help: the soak grew as fast with it.

The price is a page fault per page of every large block: reading a store in-process cost twice the CPU per GB with the
bound (benchmarks/serve.py), so a read replica, which never extracts and never grew, keeps glibc's settings
(`Settings.heap`). Set with `mallopt` (the same as MALLOC_MMAP_THRESHOLD_ and MALLOC_ARENA_MAX in the environment)
before the service starts its threads; elsewhere than glibc (musl, macOS) nothing is done, and the log says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Literal

log = logging.getLogger("hsstore.allocator")

MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept from rising
ARENA_MAX = 2
# mallopt's parameter numbers (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

Heap = Literal["bounded", "glibc", "not-glibc"]


def _mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]  # ctypes' function type is private
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


def bound_heap(bounded: bool) -> Heap:
    """Where `bounded`, fix glibc's mmap threshold at `MMAP_THRESHOLD` bytes and allow `ARENA_MAX` arenas; what the
    heap is now, for the startup log."""
    if not bounded:
        return "glibc"
    mallopt = _mallopt()
    if mallopt is None:
        log.info("the C library is not glibc: its heap is left as it is")
        return "not-glibc"
    for parameter, value in ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_ARENA_MAX, ARENA_MAX)):
        if mallopt(parameter, value) != 1:
            raise ValueError(f"glibc refused mallopt({parameter}, {value})")
    return "bounded"
