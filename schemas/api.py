"""Request and response bodies of the HTTP API (v1), shared by the service and the client."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.featureset import FeatureSet
from schemas.manifest import Manifest


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Samples stay raw JSON objects here: their hash is taken over what was sent, and each is validated on its own
    # so an error can name the sample at fault.
    samples: list[Any] = Field(min_length=1, max_length=4096)
    featureset: FeatureSet | None = None
    backend: str = "auto"
    force: bool = Field(default=False, description="re-extract even if stored; adds a version only if the bits differ")


class ExtractResult(BaseModel):
    prompt_hash: str
    sample_id: str | None
    status: str  # "extracted" | "existing" | "version_added"
    manifest: Manifest


class ExtractResponse(BaseModel):
    results: list[ExtractResult]
    extracted: int
    existing: int


class EntriesPage(BaseModel):
    entries: list[Manifest]
    next_cursor: str | None = None


class ModelInfo(BaseModel):
    path: str
    model_revision: str
    architecture: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str
    device: str


class Info(BaseModel):
    version: str
    model: ModelInfo | None
    backends_available: list[str]
    default_backend: str | None
    default_featureset: FeatureSet | None
    default_featureset_id: str | None
    window: dict[str, Any]
    limits: dict[str, int]
