"""The error body every non-2xx answer carries, and the closed list of codes both sides agree on."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel


class ErrorCode(StrEnum):
    """Every code the service sends; the client maps each to its own exception class (a test holds both to this)."""

    # bad input (4xx)
    BAD_REQUEST = "bad_request"
    INVALID_REQUEST = "invalid_request"
    INVALID_SAMPLE = "invalid_sample"
    NON_FINITE = "non_finite_features"
    IMPLAUSIBLE = "implausible_features"  # 422: constant layers or rows, statistics far outside their band
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA = "unsupported_media"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    REQUEST_TIMEOUT = "request_timeout"  # 408: no whole request head in time (service/api/connections.py)
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    JOB_NOT_FOUND = "job_not_found"
    AMBIGUOUS = "ambiguous"
    BACKEND_UNAVAILABLE = "backend_unavailable"
    WINDOW_CLOSED = "window_closed"
    DIRECT_READS_UNAVAILABLE = "direct_reads_unavailable"  # 409: the store is this host's disk, not an object store
    REVISION_UNAVAILABLE = "revision_unavailable"  # 409: this service runs another model revision
    NAME_TAKEN = "name_taken"  # 409: a dataset name already names another snapshot (names are never reused)
    # the service cannot do it now (503)
    MODEL_UNAVAILABLE = "model_unavailable"
    NOT_READY = "not_ready"
    STORE_UNAVAILABLE = "store_unavailable"  # the object store did not answer: retriable (Retry-After), not corrupt
    CATALOG_UNAVAILABLE = "catalog_unavailable"  # the catalog's database did not answer: retriable (Retry-After)
    # faults (5xx)
    CORRUPT_ENTRY = "corrupt_entry"
    BACKEND_MISMATCH = "backend_mismatch"
    STORAGE_FULL = "storage_full"  # 507: the store's disk (or quota) is full
    READ_ONLY = "read_only"  # 503: a replica on a read-only store does not write
    HANDOVER_FAILED = "handover_failed"
    SGLANG_UNAVAILABLE = "sglang_unavailable"
    INTERNAL = "internal_error"


# Every error answer also names its code in this header: HEAD answers carry no body, and a client can tell an
# hsstore error from some other server's page on the same port.
ERROR_HEADER = "X-Hsstore-Error"


class ErrorDetail(BaseModel):
    code: ErrorCode
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail
