"""Kernel backends an entry can be extracted with, and the fingerprint of everything that can change the bits."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Backend(StrEnum):
    """The kernels that actually ran for the Gated-DeltaNet layers."""

    FLA = "fla"  # fla gated delta rule + causal-conv1d
    FLA_NOCONV = "fla-noconv"  # fla rule + torch conv (the seeds' trainer)
    TORCH = "torch"  # all reference code


def check_backend(value: str | None) -> str | None:
    """The value, or ValueError naming the backends there are."""
    if value is not None and value not in {b.value for b in Backend}:
        raise ValueError(f"unknown backend {value[:40]!r}; one of {[b.value for b in Backend]}")
    return value


AUTO = "auto"
BACKEND_CHOICES = (AUTO, *(b.value for b in Backend))


class Fingerprint(BaseModel):
    """What ran, recorded with every manifest: a re-extraction whose fingerprint differs may differ in bits."""

    model_config = ConfigDict(extra="allow", frozen=True)

    torch: str
    transformers: str
    fla: str | None = None
    causal_conv1d: str | None = None
    device: str
    dtype: str
    attn_implementation: str
    kernels: dict[str, str]
    compiled: bool = False
    cuda_graphs: bool = False
    elementwise: str = "eager"  # or the fused forwards that replaced the eager elementwise chains
    batching: str = "one sequence per forward, no padding"
    device_map: str = "single device"
