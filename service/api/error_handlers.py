"""Every error leaves the service as `{"error": {"code", "message"}}`; this module is the only HTTP mapping."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, APIRouter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import ERROR_HEADER, ErrorBody, ErrorCode, ErrorDetail
from schemas.validation import describe_errors
from service import errors

log = logging.getLogger("hsstore")

STATUS: dict[type[errors.HsstoreError], int] = {
    errors.InvalidRequest: 422,
    errors.NonFiniteFeatures: 422,
    errors.ImplausibleFeatures: 422,
    errors.TooLarge: 413,
    errors.EntryNotFound: 404,
    errors.JobNotFound: 404,
    errors.AmbiguousEntry: 409,
    errors.WindowClosed: 409,
    errors.BackendUnavailable: 409,
    errors.DirectReadsUnavailable: 409,
    errors.NameTaken: 409,
    errors.RevisionUnavailable: 409,
    errors.ModelUnavailable: 503,
    errors.NotReady: 503,
    errors.StoreUnavailable: 503,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.CorruptEntry: 500,
    errors.BackendMismatch: 500,
    errors.StorageFull: 507,
    errors.ReadOnly: 503,
    errors.HandoverFailed: 502,
    errors.SGLangUnavailable: 502,
}
_HTTP_CODES = {
    400: ErrorCode.BAD_REQUEST,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA,
    422: ErrorCode.INVALID_REQUEST,  # a body past a JSON limit (service/api/bounded_json.py)
}


def error_response(status: int, code: ErrorCode, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(
        body.model_dump(mode="json"), status_code=status, headers={**(headers or {}), ERROR_HEADER: code}
    )


def error_frame(exc: Exception) -> bytes:
    """The envelope of an error met after a response began (a batch frame): mapped as a response would be."""
    if isinstance(exc, errors.HsstoreError):
        detail = ErrorDetail(code=exc.code, message=exc.message)
    else:
        log.error("unhandled error in a batch frame: %r", exc)
        detail = ErrorDetail(code=ErrorCode.INTERNAL, message="the service failed unexpectedly; its log says why")
    return ErrorBody(error=detail).model_dump_json().encode()


def status_for(exc: errors.HsstoreError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


async def _domain(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.HsstoreError)
    status = status_for(exc)
    if status >= 500:
        log.error("%s: %s", exc.code, exc.message)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if isinstance(exc, errors.StoreUnavailable):
        headers["Retry-After"] = str(exc.retry_after_s)
    return error_response(status, exc.code, exc.message, headers)


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, ErrorCode.INVALID_REQUEST, describe_errors(exc.errors(), skip=("body",)))


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, ErrorCode.BAD_REQUEST)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # starlette names the methods of the first route on the path; a path has several
        headers["Allow"] = ", ".join(_allowed(request))
    return error_response(exc.status_code, code, str(exc.detail), headers)


def _allowed(request: Request) -> list[str]:
    """Every method some route serves on the request's path (`methods_by_path`, taken when the app was built)."""
    path = request.url.path
    return sorted({m for pattern, methods in request.app.state.methods_by_path for m in methods if pattern.match(path)})


def methods_by_path(routers: Iterable[APIRouter]) -> list[tuple[re.Pattern[str], set[str]]]:
    """Each route's path pattern and methods: what a 405's Allow header lists for a path."""
    return [
        (r.path_regex, set(r.methods or ())) for router in routers for r in router.routes if isinstance(r, APIRoute)
    ]


class CatchAll:
    """The outermost layer: an exception nothing else mapped still answers with the envelope (500
    `internal_error`), and is not re-raised, so the server keeps the keep-alive connection instead of resetting it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unhandled error serving %s %s", scope.get("method"), scope.get("path"))
            if started:  # the status line is out: only closing the connection can tell the client
                raise
            response = error_response(500, ErrorCode.INTERNAL, "the service failed unexpectedly; its log says why")
            await response(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_exception_handler(errors.HsstoreError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
