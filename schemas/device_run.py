"""How this device runs this model, as `/v1/info` says it once the model is loaded: the layer mode that runs and what
chose it, every mode asked for that could not run here (and what runs instead), and the memory plan that sized the
packs and the longest sequence. Operators read it (and `hsstore health`, and `/metrics`' `hsstore_degraded`); the
fingerprint of each entry names what ran for it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class LayerMode(StrEnum):
    """How an own-rows pack's decoder layers run: replayed from CUDA graphs recorded once per kind of layer, or
    eagerly. Both give the same bits (tests/gpu/test_exact_on_gpu.py): the mode is speed, named in the fingerprint's
    `cuda_graphs` as what ran."""

    REPLAYED = "replayed"
    EAGER = "eager"


class MemoryPlanInfo(BaseModel):
    """The memory plan (service/extraction/memory_plan.py) for the model's default featureset."""

    total_gib: float
    free_after_weights_gib: float
    bytes_per_row: int = Field(description="a pack's peak bytes per row, as measured at load (before the margin)")
    fixed_gib: float
    headroom_gib: float
    featureset_id: str = Field(description="the featureset the two figures below are for (the model's default)")
    pack_tokens: int = Field(description="the rows of a pack of that featureset: the configured ones, or what fits")
    longest_sequence: int = Field(description="the longest sequence this card extracts under it; longer is a 413")


class DeviceRun(BaseModel):
    device: str
    layer_mode: LayerMode
    layer_mode_reason: str = Field(description="what chose the mode: the setting, or the table of GPU models")
    degraded: dict[str, str] = Field(
        default_factory=dict,
        description="each mode asked for that could not run here (`cuda_graphs`, `elementwise:<backend>`): why, and "
        "what runs instead (empty: everything asked for runs)",
    )
    memory: MemoryPlanInfo | None = Field(default=None, description="None off CUDA (the CPU never packs)")
