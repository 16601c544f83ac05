from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request

from schemas.backend import STORED_BACKENDS
from schemas.checks_api import CompareReport
from service.api.bounded_json import resource_router
from service.api.deps import AuditorDep, ReadScope, Scope, SettingsDep
from service.api.openapi import errors
from service.api.queries import KeyQueryDep, check_backend
from service.errors import InvalidRequest

router = resource_router("compare")


def _backend(value: str, name: str) -> str:
    """One of the backends entries are stored under (`unknown` included: imports can be compared too)."""
    if check_backend(value) is None:
        raise InvalidRequest(f"{name} names no backend")
    return value


@router.get(
    "/v1/compare/{prompt_hash}",
    dependencies=[ReadScope],
    summary="Per-layer agreement of two backends' features for one prompt",
    responses=errors(401, 403, 404, 409, 422, 503),
)
def compare(
    key: KeyQueryDep,
    request: Request,
    auditor: AuditorDep,
    settings: SettingsDep,
    a: Annotated[
        str, Query(description="backend of the first side", json_schema_extra={"enum": list(STORED_BACKENDS)})
    ] = "fla",
    b: Annotated[
        str, Query(description="backend of the second side", json_schema_extra={"enum": list(STORED_BACKENDS)})
    ] = "torch",
    extract: Annotated[bool, Query(description="extract a missing side (needs the write scope)")] = False,
) -> CompareReport:
    if extract:
        Scope("write")(request, settings)
    return auditor.compare(key, _backend(a, "a"), _backend(b, "b"), extract_missing=extract)
