"""The bodies of `POST /v1/estimate`: what extracting samples would take, before a GPU is committed, and for several
recipes, their union beside each on its own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from schemas.api import RawSample
from schemas.backend import BackendChoice
from schemas.featureset import FeatureSet, LayerId

# a featureset or recipes: not both (null is absent)
_ONE_OF_THE_TWO: list[JsonDict] = [{"not": {"required": [name]}} for name in ("featureset", "recipes")]
_ONE_OF_THE_TWO += [{"properties": {name: {"type": "null"}}} for name in ("featureset", "recipes")]


class EstimateRequest(BaseModel):
    """What extracting these samples would take, before anything runs."""

    model_config = ConfigDict(json_schema_extra={"anyOf": list(_ONE_OF_THE_TWO)})

    samples: list[RawSample] = Field(min_length=1)
    featureset: FeatureSet | None = None
    recipes: list[FeatureSet] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="instead of a featureset: estimate their union, beside each recipe extracted on its own",
    )
    backends: list[BackendChoice] = Field(default_factory=lambda: ["auto"], min_length=1)
    tokens_per_s: float | None = Field(default=None, gt=0, description="the GPU's extraction rate, if known")


class RecipeCost(BaseModel):
    """One recipe extracted on its own, beside the union that holds it."""

    featureset_id: str
    layers: list[LayerId]
    raw_bytes: int
    stored_bytes: int
    gpu_hours: float | None


class EstimateReport(BaseModel):
    samples: int
    tokens: int  # per backend: prompt (with the chat template) plus completion tokens (greedy: the most allowed)
    backends: list[str]
    featureset_id: str
    dtype: str
    bytes_per_token: int  # as stored before compression: the hidden states plus the ids (and masks) per token
    raw_bytes: int  # every sample for every backend, before compression
    compression_ratio: float
    compression_ratio_source: str
    stored_bytes: int
    tokens_per_s: float | None
    tokens_per_s_source: str
    gpu_hours: float | None
    recipes: list[RecipeCost] = Field(default_factory=list)  # with `recipes`: each on its own (the report: the union)
