from __future__ import annotations

from typing import Annotated

from fastapi import Query

from schemas.checks_api import StoreHealth
from schemas.keys import CURSOR
from service.api.bounded_json import resource_router
from service.api.deps import ReadScope, StoreDep, VersionsDep
from service.api.openapi import errors
from service.api.queries import Cursor
from service.errors import InvalidRequest, NotReady

router = resource_router("health")


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: store and catalog reachable", responses=errors(503))
def readyz(store: StoreDep, versions: VersionsDep) -> dict[str, str]:
    try:
        store.ping()
        versions.ping()
    except Exception as exc:
        raise NotReady(f"store or catalog unreachable: {exc}") from None
    return {"status": "ready"}


@router.get(
    "/v1/health",
    dependencies=[ReadScope],
    summary="What the store holds per model revision, backend and featureset, and what needs an operator's eye",
    responses=errors(401, 403),
)
def store_health(
    versions: VersionsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 150, cursor: Cursor = None
) -> StoreHealth:
    """Read from tallies kept current as versions are written and marked, and from an index of the versions that
    need attention: as fast at 10^7 versions as at 10."""
    if cursor and not CURSOR.match(cursor):
        raise InvalidRequest(f"cursor {cursor[:40]!r} is not one this service handed out")
    found = versions.needing_attention(limit=limit + 1, after_seq=int(cursor or 0))
    page = found[:limit]
    next_cursor = str(page[-1].seq) if len(found) > limit and page else None
    return StoreHealth(tallies=versions.tallies(), attention=page, next_cursor=next_cursor)
