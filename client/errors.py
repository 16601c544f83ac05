"""Typed errors for the client: one class per error code the service sends, plus what this side finds itself
(an unreachable URL, an answer that is not from an hsstore service, bytes that fail their hash)."""

from __future__ import annotations

from schemas.errors import ErrorCode


class HsstoreError(Exception):
    """An error answer from the service (`status`, `code`, `message`) or a failed check on this side."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"[{status} {code}] {message}" if status else message)


class ConnectionFailedError(HsstoreError):
    """Nothing answered at the URL (refused, unreachable, timed out)."""

    def __init__(self, message: str, url: str) -> None:
        self.url = url
        super().__init__(message)


class ConnectionLostError(ConnectionFailedError):
    """The service answered, then the connection closed (or stalled past the timeout) before the response was
    whole (the service stopped or was killed mid-response, a proxy cut it): `received` bytes of the body came.
    Nothing of it was accepted; asking again is safe."""

    def __init__(self, message: str, url: str, received: int) -> None:
        self.received = received
        super().__init__(message, url)


class NotHsstoreError(HsstoreError):
    """Something answered, but not as an hsstore service does (an HTML page, another API, a proxy's error)."""


class MixedBackendsError(HsstoreError):
    """Stored features about to meet a live model that computes other bits: another kernel backend, another
    computation, another GPU type or library versions (the trainer-side guard)."""


class InvalidRequestError(HsstoreError):
    pass


class SampleRejectedError(InvalidRequestError):
    """A sample does not follow the sample format, or is too long for the service's limit."""


class NonFiniteError(InvalidRequestError):
    """The model produced NaN or Inf for a sample; nothing was stored."""


class ImplausibleError(InvalidRequestError):
    """Features that cannot be what a model computes (constant layers or rows, statistics far outside their
    band); nothing was stored. The message names the check."""


class TooLargeError(InvalidRequestError):
    pass


class AuthError(HsstoreError):
    pass


class ForbiddenError(AuthError):
    pass


class NotFoundError(HsstoreError):
    pass


class ExtractionFailedError(HsstoreError):
    """The job extracting a dataset's missing samples (cache-through reads) failed, was cancelled, or rejected the
    sample read."""


class JobNotFoundError(NotFoundError):
    pass


class AmbiguousError(HsstoreError):
    pass


class BackendUnavailableError(HsstoreError):
    pass


class RevisionUnavailableError(HsstoreError):
    """Extraction asked of a model revision the service does not run (409)."""


class NameTakenError(HsstoreError):
    """A dataset name that already names another snapshot (409): choose another name."""


class DirectReadsUnavailableError(HsstoreError):
    """The service keeps its blobs on its own disk: read through it (FeatureClient(direct_reads=False))."""


class WindowClosedError(HsstoreError):
    """Extraction waits for a downtime window: open one, or submit a warm job."""


class ModelUnavailableError(HsstoreError):
    pass


class NotReadyError(HsstoreError):
    pass


class ServerError(HsstoreError):
    pass


class StoreUnavailableError(HsstoreError):
    """The service's object store is down or refusing: retriable; the loaders retry it with backoff."""


class CatalogUnavailableError(StoreUnavailableError):
    """The service's catalog database is down or restarting: retriable, as the object store's outage is."""


class IntegrityError(HsstoreError):
    """What arrived does not hash to what the service said it sent, or a stored entry failed its check."""


class StorageFullError(ServerError):
    pass


class ReadOnlyError(HsstoreError):
    """The service serves a read-only store: write through a replica that owns the store."""


class BackendMismatchError(ServerError):
    pass


class HandoverError(ServerError):
    pass


class SGLangError(ServerError):
    pass


BY_CODE: dict[ErrorCode, type[HsstoreError]] = {
    ErrorCode.BAD_REQUEST: InvalidRequestError,
    ErrorCode.INVALID_REQUEST: InvalidRequestError,
    ErrorCode.METHOD_NOT_ALLOWED: InvalidRequestError,
    ErrorCode.REQUEST_TIMEOUT: InvalidRequestError,
    ErrorCode.UNSUPPORTED_MEDIA: InvalidRequestError,
    ErrorCode.INVALID_SAMPLE: SampleRejectedError,
    ErrorCode.NON_FINITE: NonFiniteError,
    ErrorCode.IMPLAUSIBLE: ImplausibleError,
    ErrorCode.TOO_LARGE: TooLargeError,
    ErrorCode.UNAUTHORIZED: AuthError,
    ErrorCode.FORBIDDEN: ForbiddenError,
    ErrorCode.NOT_FOUND: NotFoundError,
    ErrorCode.JOB_NOT_FOUND: JobNotFoundError,
    ErrorCode.AMBIGUOUS: AmbiguousError,
    ErrorCode.BACKEND_UNAVAILABLE: BackendUnavailableError,
    ErrorCode.WINDOW_CLOSED: WindowClosedError,
    ErrorCode.DIRECT_READS_UNAVAILABLE: DirectReadsUnavailableError,
    ErrorCode.NAME_TAKEN: NameTakenError,
    ErrorCode.REVISION_UNAVAILABLE: RevisionUnavailableError,
    ErrorCode.MODEL_UNAVAILABLE: ModelUnavailableError,
    ErrorCode.NOT_READY: NotReadyError,
    ErrorCode.STORE_UNAVAILABLE: StoreUnavailableError,
    ErrorCode.CATALOG_UNAVAILABLE: CatalogUnavailableError,
    ErrorCode.CORRUPT_ENTRY: IntegrityError,
    ErrorCode.BACKEND_MISMATCH: BackendMismatchError,
    ErrorCode.STORAGE_FULL: StorageFullError,
    ErrorCode.READ_ONLY: ReadOnlyError,
    ErrorCode.HANDOVER_FAILED: HandoverError,
    ErrorCode.SGLANG_UNAVAILABLE: SGLangError,
    ErrorCode.INTERNAL: ServerError,
}


def error_for(status: int | None, code: str | None, message: str) -> HsstoreError:
    """The exception for an error answer (`status` None: an error frame inside a 200); a code this client does
    not know falls back on the status."""
    try:
        cls = BY_CODE[ErrorCode(code or "")]
    except ValueError:
        if status is None or status >= 500:
            cls = ServerError
        else:
            cls = NotFoundError if status == 404 else InvalidRequestError
    return cls(message, status, code)
