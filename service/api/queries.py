"""Query parameters of the feature routes, parsed and validated once into a typed query."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Path, Query

from schemas import backend as backend_names
from schemas import keys
from schemas.featureset import LayerId, parse_layers
from schemas.tokens import TokenRange, parse_token_range
from service.errors import InvalidRequest

T = TypeVar("T")


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


def checked(check: Callable[[T], T], value: T | None) -> T | None:
    """A schemas check of a value given (None passes), its ValueError turned into the API's InvalidRequest."""
    if value is None:
        return None
    try:
        return check(value)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def check_prompt_hash(value: str) -> str:
    return checked(keys.check_prompt_hash, value)


def check_backend(value: str | None) -> str | None:
    return checked(backend_names.check_backend, value)


def check_model_revision(value: str | None) -> str | None:
    return checked(keys.check_model_revision, value)


def check_featureset(value: str | None) -> str | None:
    return checked(keys.check_featureset_id, value)


def key_query(
    prompt_hash: Annotated[str, Path()],
    model_revision: str | None = None,
    backend: str | None = None,
    featureset: str | None = None,
    content_hash: str | None = None,
) -> KeyQuery:
    checked(keys.check_content_hash, content_hash)
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
            parsed_layers = parse_layers(layers)
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
