"""Query parameters of the feature routes, parsed and validated once into a typed query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query

from schemas.backend import Backend
from schemas.featureset import LayerId, parse_layer
from schemas.keys import is_content_hash, is_featureset_id, is_model_revision, is_prompt_hash
from schemas.tokens import TokenRange, parse_token_range
from service.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class KeyQuery:
    """The parts of an entry key a reader names; what is left out must be unambiguous."""

    prompt_hash: str
    model_revision: str | None
    backend: str | None
    featureset_id: str | None
    content_hash: str | None


@dataclass(frozen=True, slots=True)
class FeatureQuery:
    key: KeyQuery
    layers: list[LayerId] | None
    tokens: TokenRange | None


def check_prompt_hash(value: str) -> str:
    if not is_prompt_hash(value):
        raise InvalidRequest(f"prompt_hash must be 64 lowercase hex characters (sha256), got {value[:80]!r}")
    return value


def check_backend(value: str | None) -> str | None:
    if value is not None and value not in {b.value for b in Backend}:
        raise InvalidRequest(f"unknown backend {value[:40]!r}; one of {[b.value for b in Backend]}")
    return value


def check_model_revision(value: str | None) -> str | None:
    if value is not None and not is_model_revision(value):
        raise InvalidRequest(f"model_revision must be a 40-hex commit or 'sha256:' + 64 hex, got {value[:80]!r}")
    return value


def check_featureset(value: str | None) -> str | None:
    if value is not None and not is_featureset_id(value):
        raise InvalidRequest(f"featureset must be a 16-hex featureset id, got {value[:40]!r}")
    return value


def key_query(
    prompt_hash: Annotated[str, Path()],
    model_revision: str | None = None,
    backend: str | None = None,
    featureset: str | None = None,
    content_hash: str | None = None,
) -> KeyQuery:
    if content_hash is not None and not is_content_hash(content_hash):
        raise InvalidRequest(f"content_hash must be 'sha256:' + 64 lowercase hex, got {content_hash[:80]!r}")
    return KeyQuery(
        check_prompt_hash(prompt_hash),
        check_model_revision(model_revision),
        check_backend(backend),
        check_featureset(featureset),
        content_hash,
    )


def feature_query(
    key: Annotated[KeyQuery, Depends(key_query)],
    layers: Annotated[str | None, Query(description="comma-separated layer ids: 1,16,embed,final_norm")] = None,
    tokens: Annotated[str | None, Query(description="half-open token range a:b")] = None,
) -> FeatureQuery:
    parsed_layers: list[LayerId] | None = None
    if layers is not None:
        try:
            parsed_layers = [parse_layer(token) for token in layers.split(",")]
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if len(set(parsed_layers)) != len(parsed_layers):
            raise InvalidRequest("layers names a layer twice")
    parsed_tokens: TokenRange | None = None
    if tokens is not None:
        try:
            parsed_tokens = parse_token_range(tokens)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    return FeatureQuery(key, parsed_layers, parsed_tokens)


KeyQueryDep = Annotated[KeyQuery, Depends(key_query)]
FeatureQueryDep = Annotated[FeatureQuery, Depends(feature_query)]
