"""The error body every non-2xx answer carries, and the codes both sides agree on."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


# Codes the client turns into typed exceptions; the service may send others (all still ErrorBody).
NOT_FOUND = "not_found"
AMBIGUOUS = "ambiguous"
INVALID_REQUEST = "invalid_request"
INVALID_SAMPLE = "invalid_sample"
BACKEND_UNAVAILABLE = "backend_unavailable"
MODEL_UNAVAILABLE = "model_unavailable"
NON_FINITE = "non_finite_features"
CORRUPT_ENTRY = "corrupt_entry"
TOO_LARGE = "too_large"
UNAUTHORIZED = "unauthorized"
FORBIDDEN = "forbidden"
