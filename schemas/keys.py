"""Entry keys and the formats of their parts, validated in one place for client and service."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.backend import StoredBackend, check_backend
from schemas.featureset import FeatureDtype, FeatureSet, TopK
from schemas.prompt_hash import prompt_hash as hash_prompt
from schemas.validation import describe_errors

HEX64 = re.compile(r"^[0-9a-f]{64}$")
FEATURESET_ID = re.compile(r"^[0-9a-f]{16}$")
CONTENT_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
MODEL_REVISION = re.compile(r"^(?:[0-9a-f]{40}|sha256:[0-9a-f]{64})$")
# A featureset id is `featureset` on the wire (query strings, batch items, dataset files) and `featureset_id` in
# code: a model holding one takes the field type and the config below
WIRE_FEATURESET = "featureset"
_WIRE_NAMES = {"featureset_id": WIRE_FEATURESET}
_WIRE_ID = Field(
    validation_alias=WIRE_FEATURESET,
    serialization_alias=WIRE_FEATURESET,
    description="featureset id (16 hex)",
    json_schema_extra={"pattern": FEATURESET_ID.pattern},
)
FeaturesetId = Annotated[str, _WIRE_ID]
MaybeFeaturesetId = Annotated[str | None, _WIRE_ID]  # the field's own annotation: pydantic reads none inside a union
WIRE_NAMED = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)


def is_prompt_hash(value: str) -> bool:
    return bool(HEX64.match(value))


def is_content_hash(value: str) -> bool:
    return bool(CONTENT_HASH.match(value))


def is_featureset_id(value: str) -> bool:
    return bool(FEATURESET_ID.match(value))


def is_model_revision(value: str) -> bool:
    return bool(MODEL_REVISION.match(value))


# Listings print ids shortened, as git prints commits; any unique prefix of at least this many hex digits names
# the same thing again.
MIN_PREFIX = 6
PROMPT_PREFIX = re.compile(rf"^[0-9a-f]{{{MIN_PREFIX},64}}$")
CONTENT_PREFIX = re.compile(rf"^(?:sha256:)?[0-9a-f]{{{MIN_PREFIX},64}}$")
# a listing's cursor: ASCII digits the service handed out (catalogs count in signed 64-bit: 18 digits always fit)
CURSOR = re.compile(r"^[0-9]{0,18}$")


def check_prompt_hash_prefix(value: str) -> str:
    """A prompt hash or a prefix of one (at least MIN_PREFIX lowercase hex digits)."""
    if not PROMPT_PREFIX.match(value):
        raise ValueError(f"prompt_hash must be {MIN_PREFIX} to 64 lowercase hex digits (a prefix), got {value[:80]!r}")
    return value


def check_content_hash_prefix(value: str) -> str:
    """A content hash or a prefix of one, with or without `sha256:`; returned with it."""
    if not CONTENT_PREFIX.match(value):
        raise ValueError(
            f"content_hash must be 'sha256:' and {MIN_PREFIX} to 64 lowercase hex digits (a prefix), got {value[:80]!r}"
        )
    return value if value.startswith("sha256:") else "sha256:" + value


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """[low, high) of the strings that start with `prefix` (ids are ASCII, so DEL sorts after every character)."""
    return prefix, prefix + "\x7f"


def check_prompt_hash(value: str) -> str:
    """The value, or ValueError saying what a prompt hash looks like (one message for query strings and bodies)."""
    if not is_prompt_hash(value):
        raise ValueError(f"prompt_hash must be 64 lowercase hex characters (sha256), got {value[:80]!r}")
    return value


def check_content_hash(value: str | None) -> str | None:
    if value is not None and not is_content_hash(value):
        raise ValueError(f"content_hash must be 'sha256:' + 64 lowercase hex, got {value[:80]!r}")
    return value


def check_model_revision(value: str | None) -> str | None:
    if value is not None and not is_model_revision(value):
        raise ValueError(f"model_revision must be a 40-hex commit or 'sha256:' + 64 hex, got {value[:80]!r}")
    return value


def check_featureset_id(value: str | None) -> str | None:
    if value is not None and not is_featureset_id(value):
        raise ValueError(f"featureset must be a 16-hex featureset id, got {value[:40]!r}")
    return value


@dataclass(frozen=True, slots=True)
class EntryKey:
    """(prompt_hash, model_revision, backend, featureset id): what one entry, with all its versions, is stored under."""

    prompt_hash: str
    model_revision: str
    backend: str
    featureset_id: str

    def __post_init__(self) -> None:
        if not is_prompt_hash(self.prompt_hash):
            raise ValueError(f"prompt_hash must be 64 lowercase hex characters, got {self.prompt_hash!r}")
        if not is_model_revision(self.model_revision):
            raise ValueError(f"model_revision must be a 40-hex commit or 'sha256:'+64 hex, got {self.model_revision!r}")
        if not is_featureset_id(self.featureset_id):
            raise ValueError(f"featureset id must be 16 lowercase hex characters, got {self.featureset_id!r}")


def version_name(key: EntryKey, content_hash: str) -> str:
    """A stable file name for one version's manifest document."""
    joined = "|".join((key.prompt_hash, key.model_revision, key.backend, key.featureset_id, content_hash))
    return hashlib.sha256(joined.encode()).hexdigest()


class KeyParts(TypedDict, total=False):
    """A key's parts as callers name them beside the prompt itself (`FeatureKey.of`, the client's `get`, `exists`):
    written once."""

    prompt_hash: str | None
    model_revision: str | None
    backend: str | None
    featureset: FeatureSet | str | None  # an id names that featureset; an object names it by its parts
    content_hash: str | None


class KeyNamingError(ValueError):
    """Neither or both of prompt and prompt_hash: the caller's mistake, not a malformed part."""


class FeatureKey(BaseModel):
    """Which entry a reader means: its prompt hash, plus the key parts that narrow it (a part left out must leave one
    entry), plus optionally a pinned version. One type for the client, the routes and the core; its JSON form is the
    model's, its query-string form `params()` (the prompt hash goes in the path).

    A featureset is named by its id (that featureset's entry) or by its parts: `dtype` (with `target_ids`,
    `top_k`) and the layers the read asks for, which any stored featureset holding them serves (a union of several
    recipes' layers, extracted once, serves each recipe)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, **WIRE_NAMED)

    prompt_hash: str = Field(json_schema_extra={"pattern": HEX64.pattern})
    model_revision: str | None = Field(default=None, json_schema_extra={"pattern": MODEL_REVISION.pattern})
    backend: StoredBackend | None = None
    featureset_id: MaybeFeaturesetId = None
    content_hash: str | None = Field(
        default=None, description="pin one version", json_schema_extra={"pattern": CONTENT_HASH.pattern}
    )
    dtype: FeatureDtype | None = Field(
        default=None, description="with the layers read: a featureset by its parts, served by any entry holding them"
    )
    target_ids: bool | None = Field(default=None, description="with dtype: the featureset holds target ids")
    top_k: TopK | None = Field(default=None, description="with dtype: the featureset holds this top-k")

    _prompt_hash = field_validator("prompt_hash")(lambda value: check_prompt_hash(value))
    _model_revision = field_validator("model_revision")(lambda value: check_model_revision(value))
    _featureset_id = field_validator("featureset_id")(lambda value: check_featureset_id(value))
    _content_hash = field_validator("content_hash")(lambda value: check_content_hash(value))
    _backend = field_validator("backend")(lambda value: check_backend(value))

    @classmethod
    def of(cls, prompt: Mapping[str, Any] | None = None, **named: Unpack[KeyParts]) -> FeatureKey:
        """The key as callers name it: the prompt itself (hashed here) or its hash, a featureset by its id or, as an
        object, by its parts (the read then names its layers: `FeatureSet.layers` unless it asks for fewer).
        KeyNamingError for neither or both of prompt and prompt_hash; ValueError, in words, for a part that is not
        what it should be."""
        unknown = sorted(set(named) - set(KeyParts.__annotations__))
        if unknown:  # keywords through **: a misspelt one must not pass unseen
            raise TypeError(f"unexpected key part(s) {unknown}; a key names {sorted(KeyParts.__annotations__)}")
        prompt_hash, featureset = named.get("prompt_hash"), named.get("featureset")
        if (prompt is None) == (prompt_hash is None):
            raise KeyNamingError("name exactly one of prompt or prompt_hash")
        parts: dict[str, object] = {"featureset_id": featureset}
        if isinstance(featureset, FeatureSet):
            parts = {"dtype": featureset.dtype, "target_ids": featureset.target_ids or None, "top_k": featureset.top_k}
        try:
            return cls(
                # the parts as a caller named them, typed or not: pydantic validates each (ValueError in words)
                prompt_hash=prompt_hash if prompt_hash is not None else hash_prompt(prompt),  # type: ignore[arg-type]
                model_revision=named.get("model_revision"),
                backend=named.get("backend"),
                content_hash=named.get("content_hash"),
                # as above: validated by pydantic
                **parts,  # type: ignore[arg-type]
            )
        except ValidationError as exc:
            raise ValueError(describe_errors(exc.errors(include_url=False, include_input=False))) from None

    @property
    def by_parts(self) -> bool:
        """Whether the key names parts of a featureset (dtype, target ids, top-k)."""
        return self.dtype is not None or self.target_ids is not None or self.top_k is not None

    def params(self) -> dict[str, str]:
        """The query-string form of everything but the prompt hash (under the wire's names)."""
        return {
            _WIRE_NAMES.get(name, name): _query_value(value)
            for name in _NARROWING
            if (value := getattr(self, name)) is not None
        }

    def narrowing(self) -> str:
        """The parts given besides the prompt hash, for messages."""
        return ", ".join(f"{k}={v}" for k, v in self.params().items()) or "no other key part"


_NARROWING = ("model_revision", "backend", "featureset_id", "content_hash", "dtype", "target_ids", "top_k")


def _query_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """Which versions a listing shows (`GET /v1/entries`, the catalog's `find`): every part optional; `prompt_hash`
    and `content_hash` match as prefixes (a whole hash is its own prefix), `since` is a catalog timestamp."""

    prompt_hash: str | None = None
    model_revision: str | None = None
    backend: str | None = None
    featureset_id: str | None = None
    content_hash: str | None = None
    since: str | None = None

    @classmethod
    def of_key(cls, key: FeatureKey) -> EntryFilter:
        return cls(key.prompt_hash, key.model_revision, key.backend, key.featureset_id, key.content_hash)

    def params(self) -> dict[str, str]:
        """The query-string form (under the wire's names)."""
        return {_WIRE_NAMES.get(name, name): value for name in _FILTERS if (value := getattr(self, name)) is not None}


_FILTERS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash", "since")


class EntryFilters(KeyParts, total=False):
    """A listing's filters as keywords (the client's `entries`): a key's parts, and `since`."""

    since: str | None
