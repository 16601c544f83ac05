from __future__ import annotations

from schemas.api import ExtractRequest, ExtractResponse
from service.api.bounded_json import resource_router
from service.api.deps import WriterDep, WriteScope
from service.api.openapi import errors

router = resource_router("extract")


@router.post(
    "/v1/extract",
    dependencies=[WriteScope],
    summary="Extract the samples' features now (existing entries are returned as they are)",
    responses=errors(401, 403, 409, 413, 422, 503),
)
def extract(request: ExtractRequest, writer: WriterDep) -> ExtractResponse:
    return writer.extract(request)
