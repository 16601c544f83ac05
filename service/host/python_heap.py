"""The Python heap of a long-running process: what it imported and built at start kept out of the cyclic collector.

A full collection walks every object the collector tracks, and a service holds hundreds of thousands from the start
(torch's, transformers', the tokenizer's, its own modules), alive for as long as the process. Bulk work that allocates
many objects (a job of 10^6 samples parsed, tokenised and spooled) triggers full collections again and again, each one
walking that heap to free nothing: with it frozen, a 10^6-sample job's submission takes 0.86x (SQLite) and 0.80x
(Postgres) of the time (docs/measurements.md, "The startup heap frozen").
`gc.freeze` moves what is alive now to a permanent generation that collections skip; what those objects refer to is
still freed by reference counting when they go, only cycles among them stay. Done once per process, at start: a
later call would keep whatever short-lived cycles are alive at that moment for good.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()


def freeze_startup_heap() -> bool:
    """Move every object alive now out of the collector's reach, the first time in this process; whether this call
    froze it."""
    with _lock:
        if gc.get_freeze_count():  # frozen already: by an earlier start in this process, or by whatever hosts it
            return False
        gc.collect()  # what is garbage already goes first, not into the permanent generation
        gc.freeze()
        return True
