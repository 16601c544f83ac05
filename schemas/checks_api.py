"""What the store's checks answer over HTTP: audits (stored entries re-extracted), verification (stored bytes
against what was recorded), a comparison of two backends' features, and the store's health (its tallies and the
versions that need an operator's eye). Shared by the service and the client, beside api.py."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from schemas.backend import StoredBackend
from schemas.featureset import LayerId
from schemas.manifest import Manifest
from schemas.states import Integrity
from schemas.validation import JsonBool, JsonInt


class LayerComparison(BaseModel):
    layer: LayerId
    cosine_mean: float
    cosine_min: float
    max_abs_diff: float
    bitwise_equal_fraction: float


class CompareReport(BaseModel):
    prompt_hash: str
    model_revision: str
    featureset_id: str
    num_tokens: int
    a: str
    b: str
    a_content_hash: str
    b_content_hash: str
    extracted: list[str]  # backends extracted for this comparison
    layers: list[LayerComparison]


class AuditRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sample: JsonInt = Field(ge=1, le=100_000, description="how many stored entries to re-extract")
    backend: StoredBackend | None = None
    seed: JsonInt | None = None
    imports: JsonBool = Field(
        default=False,
        description="check imported entries instead: those never checked against the model, or suspect, each by the "
        "import spot check (the model's own features for its first tokens must agree)",
    )


class AuditResult(BaseModel):
    prompt_hash: str
    backend: str
    featureset_id: str
    content_hash: str
    stored: Integrity = Integrity.INTACT  # the stored bytes, read and checked before re-extracting
    reproduced: bool  # an import: its features agree with the model's
    reproduced_hash: str | None = None  # an extracted entry's re-extraction
    detail: str | None = None  # an import's per-layer agreement


class VerifyResult(BaseModel):
    prompt_hash: str
    backend: str
    content_hash: str
    status: Integrity
    detail: str | None = None


class VerifyReport(BaseModel):
    checked: int
    intact: int
    corrupt: list[VerifyResult]
    resumed_after: int = 0  # the catalog position a resumed scrub began after


class AuditReport(BaseModel):
    total: int
    reproduced: int
    mismatched: int
    skipped: int
    skipped_reason: str | None = None
    results: list[AuditResult]


class StoreTally(BaseModel):
    """What one (model revision, backend, featureset) holds, kept current by the catalog (never counted by a scan)."""

    model_revision: str
    backend: str
    featureset_id: str
    entries: int = Field(description="versions stored")
    tokens: int = Field(description="tokens the stored versions hold")
    bytes: int = Field(description="bytes the stored versions' tensors hold before compression")
    flagged: int = Field(description="versions the content checks found unusual")
    damaged: int = Field(description="versions whose stored bytes a check found changed")
    suspect: int = Field(description="imports found wrong, suspect by their run, or never vetted")
    unchecked: int = Field(
        default=0, description="versions never checked: neither re-extracted by an audit nor read back by a scrub"
    )


class StoreHealth(BaseModel):
    """What `hsstore health` shows: the tallies, and the first versions that need an operator's eye."""

    tallies: list[StoreTally]
    attention: list[Manifest] = Field(description="flagged, damaged or suspect versions, oldest first, up to `limit`")
    next_cursor: str | None = None
