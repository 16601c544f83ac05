"""The host memory budget a service holds itself to: what it held once started (taken again when its model loads)
plus the most each part that may grow after that can take. The parts: the writer's entries in flight (it never holds
more than `FeatureWriter.max_in_flight` waiting to be written, each at most the longest sample it accepts) and a share
for what fills once per distinct shape (oneDNN's primitive cache, Triton's and cuBLAS's choices, the pinned-memory
cache's blocks) and the allocator's rounding. What does not grow is bounded elsewhere: the C heap
(allocator.py), request bodies (`max_request_bytes`), the catalog's page caches. Measured against it by
benchmarks/soak.py (docs/measurements.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.host_memory import HostMemory

MIB = 1 << 20
# caches per distinct shape and the allocator's rounding, as a share of what the service held once loaded: the
# issue's bound on a window's growth after warm-up (#63; the soaks on record grew 1.2-1.7%)
CACHE_SHARE = 0.10
BYTES_PER_VALUE = 2  # entries in flight counted in bfloat16, the widest stored dtype


def resident_bytes() -> int:
    """This process's resident set now (Linux's /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


@dataclass
class MemoryBudget:
    in_flight: int  # entries the writer may hold waiting to be written
    entry_tokens: int  # the longest sample they are counted at
    values_per_token: int  # stored values per token under the default featureset (layers x hidden size)
    at_load: int = field(default_factory=resident_bytes)

    def loaded(self) -> None:
        """Take what the service holds now as its level: at start, and when its model has loaded."""
        self.at_load = resident_bytes()

    def following(self, inner: Callable[[str], None] | None) -> Callable[[str], None]:
        """A model manager's `on_event`: `inner`'s, with the level taken again as each load ends."""

        def on_event(event: str) -> None:
            if event == "load":
                self.loaded()
            if inner is not None:
                inner(event)

        return on_event

    def parts(self) -> dict[str, int]:
        entry = self.entry_tokens * self.values_per_token * BYTES_PER_VALUE
        return {"writes_in_flight": self.in_flight * entry, "caches_and_rounding": int(self.at_load * CACHE_SHARE)}

    def budget(self) -> int:
        return self.at_load + sum(self.parts().values())

    def state(self) -> HostMemory:
        return HostMemory(
            resident_mib=round(resident_bytes() / MIB, 1),
            at_load_mib=round(self.at_load / MIB, 1),
            parts_mib={name: round(size / MIB, 1) for name, size in self.parts().items()},
            entry_tokens=self.entry_tokens,
            budget_mib=round(self.budget() / MIB, 1),
        )
