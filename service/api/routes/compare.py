from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from schemas.api import CompareReport
from schemas.backend import Backend
from service.api.deps import LibraryDep, ReadScope, Scope, SettingsDep
from service.api.openapi import errors
from service.api.queries import check_backend, check_featureset, check_model_revision, check_prompt_hash
from service.errors import InvalidRequest

router = APIRouter(tags=["compare"])


def _backend(value: str, name: str) -> Backend:
    if check_backend(value) is None:
        raise InvalidRequest(f"{name} names no backend")
    return Backend(value)


@router.get(
    "/v1/compare/{prompt_hash}",
    dependencies=[ReadScope],
    summary="Per-layer agreement of two backends' features for one prompt",
    responses=errors(401, 403, 404, 409, 422, 503),
)
def compare(
    prompt_hash: str,
    request: Request,
    library: LibraryDep,
    settings: SettingsDep,
    a: Annotated[str, Query(description="backend of the first side")] = "fla",
    b: Annotated[str, Query(description="backend of the second side")] = "torch",
    model_revision: str | None = None,
    featureset: str | None = None,
    extract: Annotated[bool, Query(description="extract a missing side (needs the write scope)")] = False,
) -> CompareReport:
    if extract:
        Scope("write")(request, settings)
    return library.compare(
        check_prompt_hash(prompt_hash),
        _backend(a, "a"),
        _backend(b, "b"),
        check_model_revision(model_revision),
        check_featureset(featureset),
        extract_missing=extract,
    )
