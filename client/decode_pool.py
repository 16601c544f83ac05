"""The decode pool: the threads that check and decode chunks (blosc, blake3, crc32c and numpy's copies release the
GIL, so they run on every core while a receiving thread reads its socket), and each thread's scratch block."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_POOL: ThreadPoolExecutor | None = None
_scratch = threading.local()


def decoders() -> ThreadPoolExecutor:
    """The decode pool, made on first use in each process (a DataLoader worker forked from a process that had one
    inherits its object but none of its threads): a thread per core this process may run on (its affinity, which
    a container's or a job scheduler's CPU set narrows; not the machine's count)."""
    global _POOL
    if _POOL is None:
        cores = len(os.sched_getaffinity(0))
        _POOL = ThreadPoolExecutor(max_workers=max(2, cores), thread_name_prefix="hsstore-decode")
    return _POOL


def _forget_pool() -> None:
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def scratch_block(nbytes: int) -> np.ndarray:
    block = getattr(_scratch, "block", None)
    if block is None or block.nbytes < nbytes:
        block = _scratch.block = np.empty(nbytes, dtype=np.uint8)
    return block[:nbytes]
