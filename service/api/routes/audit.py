from __future__ import annotations

from fastapi import APIRouter

from schemas.checks_api import AuditReport, AuditRequest
from service.api.deps import AuditorDep, WriteScope
from service.api.openapi import errors
from service.api.queries import check_backend

router = APIRouter(tags=["audit"])


@router.post(
    "/v1/audit",
    dependencies=[WriteScope],
    summary="Re-extract a sample of stored entries and check their bits",
    responses=errors(401, 403, 409, 422, 503),
)
def audit(request: AuditRequest, auditor: AuditorDep) -> AuditReport:
    return auditor.audit(request.sample, check_backend(request.backend), request.seed, request.imports)
