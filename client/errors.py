"""Typed errors for the client: one per error code the service sends, plus integrity failures found on receipt."""

from __future__ import annotations

from schemas import errors as codes


class HsstoreError(Exception):
    """An error answer from the service (`status`, `code`, `message`) or a failed check on this side."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"[{status} {code}] {message}" if status else message)


class NotFoundError(HsstoreError):
    pass


class AmbiguousError(HsstoreError):
    pass


class InvalidRequestError(HsstoreError):
    pass


class BackendUnavailableError(HsstoreError):
    pass


class ModelUnavailableError(HsstoreError):
    pass


class AuthError(HsstoreError):
    pass


class ServerError(HsstoreError):
    pass


class IntegrityError(HsstoreError):
    """What arrived does not hash to what the service said it sent."""


BY_CODE: dict[str, type[HsstoreError]] = {
    codes.NOT_FOUND: NotFoundError,
    codes.AMBIGUOUS: AmbiguousError,
    codes.INVALID_REQUEST: InvalidRequestError,
    codes.INVALID_SAMPLE: InvalidRequestError,
    codes.NON_FINITE: InvalidRequestError,
    codes.TOO_LARGE: InvalidRequestError,
    codes.BACKEND_UNAVAILABLE: BackendUnavailableError,
    codes.MODEL_UNAVAILABLE: ModelUnavailableError,
    codes.UNAUTHORIZED: AuthError,
    codes.FORBIDDEN: AuthError,
    codes.CORRUPT_ENTRY: IntegrityError,
}


def error_for(status: int, code: str | None, message: str) -> HsstoreError:
    cls = BY_CODE.get(code or "")
    if cls is None:
        cls = NotFoundError if status == 404 else ServerError if status >= 500 else InvalidRequestError
    return cls(message, status, code)
