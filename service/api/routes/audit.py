from __future__ import annotations

from schemas.checks_api import AuditReport, AuditRequest
from service.api.bounded_json import resource_router
from service.api.deps import AuditorDep, WriteScope
from service.api.openapi import errors
from service.api.queries import check_backend

router = resource_router("audit")


@router.post(
    "/v1/audit",
    dependencies=[WriteScope],
    summary="Re-extract a sample of stored entries and check their bits",
    responses=errors(401, 403, 409, 422, 503),
)
def audit(request: AuditRequest, auditor: AuditorDep) -> AuditReport:
    return auditor.audit(request.sample, check_backend(request.backend), request.seed, request.imports)
