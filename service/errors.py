"""Domain errors raised by the core; `service/api/error_handlers.py` maps each to an HTTP status, once."""

from __future__ import annotations

from schemas.errors import ErrorCode


class ConfigError(ValueError):
    """A setting that cannot work (a config file missing or not TOML, a URL of no known scheme, a catalog out of
    reach at start): said when the service starts, never a silent fallback, and never an HTTP answer."""


class HsstoreError(Exception):
    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class InvalidRequest(HsstoreError):
    code = ErrorCode.INVALID_REQUEST


class InvalidSample(InvalidRequest):
    code = ErrorCode.INVALID_SAMPLE


class NonFiniteFeatures(HsstoreError):
    code = ErrorCode.NON_FINITE


class ImplausibleFeatures(HsstoreError):
    """Features that hash fine but cannot be what a model computes (service/core/write/content_checks.py)."""

    code = ErrorCode.IMPLAUSIBLE


class TooLarge(HsstoreError):
    code = ErrorCode.TOO_LARGE


class EntryNotFound(HsstoreError):
    code = ErrorCode.NOT_FOUND


class DatasetNotFound(EntryNotFound):
    """No dataset of that id or name (404 `not_found`, as for entries)."""


class JobNotFound(HsstoreError):
    code = ErrorCode.JOB_NOT_FOUND


class AmbiguousEntry(HsstoreError):
    code = ErrorCode.AMBIGUOUS


class BackendUnavailable(HsstoreError):
    code = ErrorCode.BACKEND_UNAVAILABLE


class WindowClosed(HsstoreError):
    code = ErrorCode.WINDOW_CLOSED


class RevisionUnavailable(HsstoreError):
    """Extraction asked of a model revision this service does not run (as a backend it cannot run: 409)."""

    code = ErrorCode.REVISION_UNAVAILABLE


class NameTaken(HsstoreError):
    """A dataset name already names another snapshot: a conflict with what is stored, not malformed input."""

    code = ErrorCode.NAME_TAKEN


class DirectReadsUnavailable(HsstoreError):
    """The blobs lie on this service's own disk: there is nothing a client could read directly."""

    code = ErrorCode.DIRECT_READS_UNAVAILABLE


class ModelUnavailable(HsstoreError):
    code = ErrorCode.MODEL_UNAVAILABLE


class NotReady(HsstoreError):
    code = ErrorCode.NOT_READY


class Unauthorized(HsstoreError):
    code = ErrorCode.UNAUTHORIZED


class Forbidden(HsstoreError):
    code = ErrorCode.FORBIDDEN


class StoreUnavailable(HsstoreError):
    """The object store holding the blobs failed to answer (down, refused, throttled): an outage a client retries,
    never a verdict on the stored bytes, which only a verified mismatch is."""

    code = ErrorCode.STORE_UNAVAILABLE
    retry_after_s = 5


class CatalogUnavailable(StoreUnavailable):
    """The catalog's database did not answer (down, restarting, out of connections): retriable, within a second."""

    code = ErrorCode.CATALOG_UNAVAILABLE
    retry_after_s = 2


class CorruptEntry(HsstoreError):
    code = ErrorCode.CORRUPT_ENTRY


class BackendMismatch(HsstoreError):
    """The kernels that ran are not the ones asked for: nothing is stored."""

    code = ErrorCode.BACKEND_MISMATCH


class StorageFull(HsstoreError):
    """The store has no room for the entry; nothing of it was published."""

    code = ErrorCode.STORAGE_FULL


class ReadOnly(HsstoreError):
    """This replica serves a read-only store: it cannot write."""

    code = ErrorCode.READ_ONLY


class HandoverFailed(HsstoreError):
    """SGLang did not give the GPU up, or take it back, as asked."""

    code = ErrorCode.HANDOVER_FAILED


class SGLangUnavailable(HsstoreError):
    code = ErrorCode.SGLANG_UNAVAILABLE
