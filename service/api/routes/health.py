from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import StoreDep, VersionsDep
from service.api.openapi import errors
from service.errors import NotReady

router = APIRouter(tags=["health"])


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
