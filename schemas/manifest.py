"""Manifests: everything known about one stored entry version, served with its tensors."""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.backend import Fingerprint
from schemas.chunks import ChunkDigests
from schemas.featureset import FeatureSet, LayerId
from schemas.keys import EntryKey, FeatureKey
from schemas.states import SUSPECT_AUDITS, AuditStatus, CompletionSource, Integrity

SCHEMA_VERSION = 1
HIDDEN_STATES = "hidden_states"  # [T, n_layers, H]: axis 1 holds the featureset's layers
HIDDEN_SCALES = "hidden_scales"  # [T, n_layers] float32: an fp8 featureset's scale per token and layer
LAYER_ARRAYS = (HIDDEN_STATES, HIDDEN_SCALES)  # the arrays whose axis 1 is the featureset's layers
TOPK_IDS = "topk_ids"  # [T, k] int32: a `top_k` featureset's most likely next tokens, most likely first
TOPK_LOGPROBS = "topk_logprobs"  # [T, k] float32: their log-probabilities over the whole vocabulary
TOPK_MASS = "topk_mass"  # [T] float32: the probability the k hold together (what renormalising divides by)


class TensorInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    dtype: str
    shape: list[int]
    chunks: ChunkDigests | None = None  # recorded when the blob was written (entries written before: none)


class LayerStats(BaseModel):
    """Per-layer summary so garbage (all zeros, exploding values) is visible at a glance."""

    model_config = ConfigDict(frozen=True)

    layer: LayerId
    mean: float
    std: float
    absmax: float


class AuditRecord(BaseModel):
    """The last check of this version against the model (`AuditStatus`): for an extracted one, did its re-extraction
    reproduce the content hash bit for bit; for an import, did the model's own features agree with it."""

    model_config = ConfigDict(frozen=True)

    status: AuditStatus
    audited_at: str
    reproduced_hash: str | None = None  # an extracted version's re-extraction
    fingerprint: Fingerprint | None = None  # what ran for the check (none for a suspect import, never checked)
    detail: str | None = None  # an import's: the per-layer agreement, or the failed check that made it suspect


def document_name(document: bytes) -> str:
    """The name a manifest document is stored under: the sha256 of its bytes, so that a document whose bytes
    changed no longer matches its name (the rebuild's check of every field at once)."""
    return hashlib.sha256(document).hexdigest()


class IntegrityRecord(BaseModel):
    """The last check of the stored bytes against what was written (chunk digests and content hash)."""

    model_config = ConfigDict(frozen=True)

    status: Integrity
    checked_at: str
    detail: str | None = None  # what failed, for a corrupt one


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    prompt_hash: str
    model_revision: str
    backend: str
    featureset: FeatureSet
    featureset_id: str
    content_hash: str
    sample_id: str | None = None
    sample: dict[str, Any]
    num_tokens: int
    prompt_tokens: int
    completion_tokens: int
    completion_source: CompletionSource | None = None
    tensors: dict[str, TensorInfo]
    chunks_digest: str | None = None  # `schemas.chunks.entry_digest` of the tensors' chunk digests, set with them
    layer_stats: list[LayerStats]
    fingerprint: Fingerprint
    created_at: str
    seq: int | None = None  # the catalog's order of insertion; set when read back from the catalog
    audit: AuditRecord | None = None  # set by the catalog when this version has been audited
    integrity: IntegrityRecord | None = None  # set by the catalog when its stored bytes have been checked
    # what the write-time content checks found unusual but plausible: stored, and shown wherever the entry is
    content_flags: list[str] = Field(default_factory=list)

    @property
    def key(self) -> EntryKey:
        return EntryKey(self.prompt_hash, self.model_revision, self.backend, self.featureset_id)

    @property
    def suspect(self) -> bool:
        """An import found wrong, suspect by its run, or never vetted (`hsstore health` lists it)."""
        return self.audit is not None and self.audit.status in SUSPECT_AUDITS

    @property
    def corrupt(self) -> bool:
        """A scrub or a read found its stored bytes damaged (extracting it again repairs it)."""
        return self.integrity is not None and self.integrity.status == Integrity.CORRUPT

    def feature_key(self) -> FeatureKey:
        """The read key that pins exactly this version (what lets a cache answer without asking)."""
        return FeatureKey(
            prompt_hash=self.prompt_hash,
            model_revision=self.model_revision,
            backend=self.backend,
            featureset_id=self.featureset_id,
            content_hash=self.content_hash,
        )
