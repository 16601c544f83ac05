"""Every error leaves the service as `{"error": {"code", "message"}}`; this module is the only HTTP mapping."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from schemas.errors import INVALID_REQUEST, ErrorBody, ErrorDetail
from service import errors

log = logging.getLogger("hsstore")

STATUS: dict[type[errors.HsstoreError], int] = {
    errors.InvalidRequest: 422,
    errors.InvalidSample: 422,
    errors.NonFiniteFeatures: 422,
    errors.TooLarge: 413,
    errors.EntryNotFound: 404,
    errors.AmbiguousEntry: 409,
    errors.WindowClosed: 409,
    errors.JobNotFound: 404,
    errors.BackendUnavailable: 409,
    errors.ModelUnavailable: 503,
    errors.NotReady: 503,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.CorruptEntry: 500,
    errors.BackendMismatch: 500,
}
_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media",
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _status_for(exc: errors.HsstoreError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 500


async def _domain(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.HsstoreError)
    status = _status_for(exc)
    if status >= 500:
        log.error("%s: %s", exc.code, exc.message)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return error_response(status, exc.code, exc.message, headers)


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    reasons = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err.get("loc", ()) if part != "body")
        reasons.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return error_response(422, INVALID_REQUEST, "; ".join(reasons) or "invalid request")


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return error_response(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail))


def install(app: FastAPI) -> None:
    app.add_exception_handler(errors.HsstoreError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
