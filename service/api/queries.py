"""Query parameters of the feature routes, parsed and validated once into the contract's types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Header, Path, Query
from pydantic import ValidationError

from schemas import backend as backend_names
from schemas import http, keys
from schemas.api import FeatureRead
from schemas.backend import STORED_BACKENDS
from schemas.featureset import LAYERS_PATTERN, MAX_TOP_K, FeatureDtype, parse_layers
from schemas.http import BODY_FORMATS, BodyFormat
from schemas.keys import FeatureKey
from schemas.tokens import TOKENS_PATTERN
from schemas.validation import describe_errors
from service.errors import InvalidRequest

T = TypeVar("T")
R = TypeVar("R")
# a page's cursor, as every paged listing takes it: the `next_cursor` the page before handed out
Cursor = Annotated[
    str | None,
    Query(description="next_cursor of the previous page", json_schema_extra={"pattern": keys.CURSOR.pattern}),
]


def checked(check: Callable[[T], R], value: T | None) -> R | None:
    """A schemas check of a value given (None passes), its ValueError turned into the API's InvalidRequest."""
    if value is None:
        return None
    try:
        return check(value)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def check_backend(value: str | None) -> str | None:
    return checked(backend_names.check_backend, value)


def check_featureset(value: str | None) -> str | None:
    return checked(keys.check_featureset_id, value)


def key_query(
    prompt_hash: Annotated[
        str,
        Path(description="sha256 of the sample's canonical JSON", json_schema_extra={"pattern": keys.HEX64.pattern}),
    ],
    model_revision: Annotated[
        str | None,
        Query(description="hub commit or sha256:…", json_schema_extra={"pattern": keys.MODEL_REVISION.pattern}),
    ] = None,
    backend: Annotated[
        str | None,
        Query(description=backend_names.backends_described(), json_schema_extra={"enum": list(STORED_BACKENDS)}),
    ] = None,
    featureset: Annotated[
        str | None, Query(description="featureset id", json_schema_extra={"pattern": keys.FEATURESET_ID.pattern})
    ] = None,
    content_hash: Annotated[
        str | None, Query(description="pin one version", json_schema_extra={"pattern": keys.CONTENT_HASH.pattern})
    ] = None,
    dtype: Annotated[
        FeatureDtype | None,
        Query(description="with layers: a featureset by its parts, served by any stored featureset holding them"),
    ] = None,
    target_ids: Annotated[bool | None, Query(description="with dtype: the featureset holds target ids")] = None,
    top_k: Annotated[int | None, Query(ge=1, le=MAX_TOP_K, description="with dtype: the featureset's top-k")] = None,
) -> FeatureKey:
    try:
        return FeatureKey(
            prompt_hash=prompt_hash,
            model_revision=model_revision,
            backend=backend,
            featureset_id=featureset,
            content_hash=content_hash,
            dtype=dtype,
            target_ids=target_ids,
            top_k=top_k,
        )
    except ValidationError as exc:
        raise InvalidRequest(describe_errors(exc.errors(include_url=False, include_input=False))) from None


def feature_query(
    key: Annotated[FeatureKey, Depends(key_query)],
    layers: Annotated[
        str | None,
        Query(
            description="comma-separated layer ids: 1,16,embed,final_norm",
            json_schema_extra={"pattern": LAYERS_PATTERN},
        ),
    ] = None,
    tokens: Annotated[
        str | None,
        Query(
            description="half-open token range a:b, clipped to the entry", json_schema_extra={"pattern": TOKENS_PATTERN}
        ),
    ] = None,
) -> FeatureRead:
    """The read the query string names, as a batch names one of its keys."""
    parsed = checked(parse_layers, layers)
    try:
        return FeatureRead(**key.model_dump(exclude_none=True), layers=parsed, tokens=tokens)
    except ValidationError as exc:
        raise InvalidRequest(describe_errors(exc.errors(include_url=False, include_input=False))) from None


def accepted_formats(
    accept: Annotated[
        str | None,
        Header(
            description="the body formats the client reads, in its order of preference: "
            + ", ".join(f"`{spec.media_type}` ({name})" for name, spec in BODY_FORMATS.items())
        ),
    ] = None,
) -> list[BodyFormat]:
    """The formats the client takes, in its order (safetensors last whatever it lists)."""
    return http.accepted(accept)


KeyQueryDep = Annotated[FeatureKey, Depends(key_query)]
AcceptedDep = Annotated[list[BodyFormat], Depends(accepted_formats)]
FeatureReadDep = Annotated[FeatureRead, Depends(feature_query)]
