"""What a service holds in host memory against the budget it holds itself to (`GET /v1/info`'s `host_memory`, and the
gauges `hsstore_host_memory_resident_bytes` / `hsstore_host_memory_budget_bytes`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class HostMemory(BaseModel):
    resident_mib: float = Field(description="the process's resident memory now")
    at_load_mib: float = Field(
        description="resident once the service started, taken again when its model loads (a CPU model's weights, "
        "a GPU's context and pinned blocks are in it)"
    )
    parts_mib: dict[str, float] = Field(
        description="the most each part that may grow after that takes: the writes in flight (entries of the "
        "longest sample assumed, the default featureset, bfloat16), caches per distinct shape and the allocator's "
        "rounding (a share of at_load)"
    )
    entry_tokens: int = Field(description="the longest sample the writes in flight are counted at")
    budget_mib: float = Field(description="at_load plus the parts: a service above it for long is a fault to report")
