"""Request and response bodies of the HTTP API (v1), shared by the service and the client."""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from schemas.backend import BackendChoice, StoredBackend, check_backend
from schemas.device_run import DeviceRun
from schemas.featureset import FeatureSet, LayerId
from schemas.host_memory import HostMemory
from schemas.keys import (
    CONTENT_HASH,
    MODEL_REVISION,
    WIRE_FEATURESET,
    WIRE_NAMED,
    FeatureKey,
    MaybeFeaturesetId,
    check_content_hash,
    check_model_revision,
)
from schemas.manifest import Manifest
from schemas.samples import SAMPLE_JSON_SCHEMA
from schemas.states import CompletionSource, Existing, ExtractStatus, ImportStatus
from schemas.tokens import TOKENS_PATTERN, TokenRange, parse_token_range
from schemas.validation import JsonBool

# Samples stay raw JSON objects in request models: their hash is taken over what was sent, and each is validated on
# its own so an error can name the sample at fault. The schema shown for them is the real sample format.
RawSample = Annotated[Any, WithJsonSchema(SAMPLE_JSON_SCHEMA)]


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    samples: list[RawSample] = Field(min_length=1, max_length=4096)
    featureset: FeatureSet | None = None
    backend: BackendChoice = "auto"
    force: JsonBool = Field(
        default=False, description="re-extract even if stored; adds a version only if the bits differ"
    )
    existing: Existing = Field(
        default=Existing.SAME,
        description="`holding`: an entry of a featureset holding this one (a union) counts as stored and is returned",
    )


class ExtractResult(BaseModel):
    prompt_hash: str
    sample_id: str | None
    status: ExtractStatus
    manifest: Manifest


class ExtractResponse(BaseModel):
    results: list[ExtractResult]
    extracted: int
    existing: int


class EntriesPage(BaseModel):
    entries: list[Manifest]
    next_cursor: str | None = None


class ListedKey(NamedTuple):
    """A version as the key listing names it: its whole key, pinned by content hash, its tokens and creation time."""

    prompt_hash: str
    content_hash: str
    model_revision: str
    backend: str
    featureset_id: str
    num_tokens: int
    created_at: str

    def key(self) -> FeatureKey:
        return FeatureKey(
            prompt_hash=self.prompt_hash,
            model_revision=self.model_revision,
            backend=self.backend,
            featureset_id=self.featureset_id,
            content_hash=self.content_hash,
        )


class KeysPage(BaseModel):
    """A page of the key listing (`GET /v1/entries:keys`): each version a row of `ListedKey`'s fields, in that
    order (arrays, not objects: a listing of 10^7 versions is mostly their ids)."""

    columns: list[str] = Field(default=list(ListedKey._fields))
    keys: list[ListedKey]
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
    quantization: str | None = None  # a block-quantized FP8 target's scheme; None for bfloat16 weights


class Info(BaseModel):
    version: str
    model: ModelInfo | None
    backends_available: list[str]
    default_backend: str | None
    default_featureset: FeatureSet | None
    default_featureset_id: str | None
    window: dict[str, Any]
    limits: dict[str, int | None]  # max_sample_tokens None: the card's, per featureset (run.memory once loaded)
    run: DeviceRun | None = None  # how this device runs the model, once it is loaded here
    host_memory: HostMemory | None = None  # what the process holds against its budget (None: an older service)


class LayersKey(FeatureKey):
    """A key and the layers a read of it asks for (which, with a featureset's parts, also choose the entry)."""

    layers: list[LayerId] | None = Field(
        default=None, min_length=1, max_length=1024, description="in the order served; a layer named twice is read once"
    )

    @field_validator("layers")
    @classmethod
    def _once(cls, value: list[LayerId] | None) -> list[LayerId] | None:
        return list(dict.fromkeys(value)) if value is not None else None

    @property
    def key(self) -> FeatureKey:
        return FeatureKey(**self.model_dump(exclude={"layers", "tokens"}))


class FeatureRead(LayersKey):
    """A read: which entry, and which part of it. One GET's query string, or one key of a batch (the same rules)."""

    tokens: str | None = Field(
        default=None, description="half-open token range a:b", json_schema_extra={"pattern": TOKENS_PATTERN}
    )

    @field_validator("tokens")
    @classmethod
    def _tokens(cls, value: str | None) -> str | None:
        if value is not None:
            parse_token_range(value)
        return value

    def token_range(self) -> TokenRange | None:
        return parse_token_range(self.tokens) if self.tokens is not None else None

    def read_params(self) -> dict[str, str]:
        """The query string of a read of this part alone (`GET /v1/features/{prompt_hash}`, and its HEAD)."""
        found = self.key.params()
        if self.layers is not None:
            found["layers"] = ",".join(map(str, self.layers))
        if self.tokens is not None:
            found["tokens"] = self.tokens
        return found


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[FeatureRead] = Field(
        min_length=1,
        description="at most the service's max_batch_keys, none repeated",
        json_schema_extra={"uniqueItems": True},
    )

    @field_validator("keys")
    @classmethod
    def _distinct(cls, keys: list[FeatureRead]) -> list[FeatureRead]:
        seen: dict[str, int] = {}
        for index, item in enumerate(keys):
            form = item.model_dump_json()
            if form in seen:
                raise ValueError(f"keys[{index}] repeats keys[{seen[form]}]: ask for each entry once")
            seen[form] = index
        return keys


IMPORT_METADATA = "import"  # the safetensors metadata key of an import body that carries its ImportRequest


class ImportRequest(BaseModel):
    """One entry to import, sent as the `import` metadata of a safetensors body holding its tensors in hsstore's
    layout: hidden_states bf16 [T, n_layers, H] (layers in featureset order), input_ids int32 [T], optionally
    loss_mask uint8 [T]. The service recomputes the content hash and stores nothing unless it matches."""

    model_config = ConfigDict(extra="forbid")

    sample: RawSample
    layers: list[LayerId] = Field(min_length=1, max_length=1024)
    model_revision: str = Field(json_schema_extra={"pattern": MODEL_REVISION.pattern})
    backend: str | None = Field(default=None, description="stated by the importer; None stores it as 'unknown'")
    source: str = Field(min_length=1, max_length=4096, description="where the features came from (format:file)")
    content_hash: str = Field(json_schema_extra={"pattern": CONTENT_HASH.pattern})
    prompt_tokens: int = Field(ge=1)
    completion_source: CompletionSource | None = None
    run: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the import run this entry belongs to (`hsstore import` makes one per invocation): its first "
        "imports are spot-checked against the model, and once one fails the rest are checked one by one and what the "
        "run stored before is marked suspect",
    )

    _model_revision = field_validator("model_revision")(lambda value: check_model_revision(value))
    _content_hash = field_validator("content_hash")(lambda value: check_content_hash(value))
    _backend = field_validator("backend")(lambda value: check_backend(value))


class ImportResult(BaseModel):
    prompt_hash: str
    status: ImportStatus
    manifest: Manifest
    warnings: list[str] = []


class DatasetRequest(BaseModel):
    """A dataset snapshot from whole versions: `keys` (each resolved as a read of it is, with its layers, to its
    newest version and pinned), or every version a listing with these filters shows, in listing order."""

    model_config = ConfigDict(
        extra="forbid",
        **WIRE_NAMED,
        json_schema_extra={  # keys, or filters: not both
            "anyOf": [
                {"not": {"required": ["keys"]}},
                {"properties": {"keys": {"type": "null"}}},
                {
                    "properties": {
                        name: {"type": "null"} for name in ("model_revision", "backend", WIRE_FEATURESET, "since")
                    }
                },
            ]
        },
    )

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    keys: list[LayersKey] | None = Field(default=None, min_length=1, max_length=200_000)
    model_revision: str | None = Field(default=None, json_schema_extra={"pattern": MODEL_REVISION.pattern})
    backend: StoredBackend | None = None
    featureset_id: MaybeFeaturesetId = None
    since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})


class DatasetInfo(BaseModel):
    dataset_id: str
    name: str
    entries: int
    tokens: int
    bytes: int
    created_at: str
