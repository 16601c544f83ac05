from __future__ import annotations

from schemas.estimates import EstimateReport, EstimateRequest
from service.api.bounded_json import resource_router
from service.api.deps import EstimatorDep, ReadScope
from service.api.openapi import errors

router = resource_router("estimate")


@router.post(
    "/v1/estimate",
    dependencies=[ReadScope],
    summary="Tokens, bytes and GPU-hours extracting these samples would take, before anything runs",
    responses=errors(401, 403, 409, 413, 422, 503),
)
def estimate(request: EstimateRequest, estimator: EstimatorDep) -> EstimateReport:
    """Samples are tokenised as extraction would (chat template included) and refused alike; nothing is stored."""
    return estimator.estimate(request)
