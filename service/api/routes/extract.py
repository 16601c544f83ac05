from __future__ import annotations

from fastapi import APIRouter

from schemas.api import ExtractRequest, ExtractResponse
from service.api.deps import LibraryDep, WriteScope

router = APIRouter(tags=["extract"])


@router.post("/v1/extract", dependencies=[WriteScope])
def extract(request: ExtractRequest, library: LibraryDep) -> ExtractResponse:
    return library.extract(request)
