"""Domain errors raised by the core; `service/api/error_handlers.py` maps each to an HTTP status, once."""

from __future__ import annotations

from schemas import errors as codes


class HsstoreError(Exception):
    code = "error"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class InvalidRequest(HsstoreError):
    code = codes.INVALID_REQUEST


class InvalidSample(InvalidRequest):
    code = codes.INVALID_SAMPLE


class TooLarge(HsstoreError):
    code = codes.TOO_LARGE


class EntryNotFound(HsstoreError):
    code = codes.NOT_FOUND


class AmbiguousEntry(HsstoreError):
    code = codes.AMBIGUOUS


class BackendUnavailable(HsstoreError):
    code = codes.BACKEND_UNAVAILABLE


class ModelUnavailable(HsstoreError):
    code = codes.MODEL_UNAVAILABLE


class WindowClosed(HsstoreError):
    code = "window_closed"


class JobNotFound(HsstoreError):
    code = "not_found"


class NotReady(HsstoreError):
    code = "not_ready"


class NonFiniteFeatures(HsstoreError):
    code = codes.NON_FINITE


class CorruptEntry(HsstoreError):
    code = codes.CORRUPT_ENTRY


class BackendMismatch(HsstoreError):
    """The kernels that ran are not the ones asked for: nothing is stored."""

    code = "backend_mismatch"


class Unauthorized(HsstoreError):
    code = codes.UNAUTHORIZED


class Forbidden(HsstoreError):
    code = codes.FORBIDDEN
