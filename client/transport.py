"""The client's one seam to the service: requests over an `httpx.Client` (a socket, or an in-process ASGI app in
tests), feature bodies over `client.bodies` (read into the caller's buffer), failures turned into the client's own
errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from json import dumps
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, ValidationError

from client.bodies import Body, BodyCutOff, Connections, HttpxBody, ReceiveFailed, read_all
from client.errors import (
    ConnectionFailedError,
    ConnectionLostError,
    HsstoreError,
    IntegrityError,
    NotHsstoreError,
    error_for,
)
from schemas.api import FeatureRead
from schemas.errors import ERROR_HEADER, ErrorCode
from schemas.json_limits import load_json

ModelT = TypeVar("ModelT", bound=BaseModel)


class Transport:
    """`http` carries every request; `sockets`, when given, carries the streamed bodies (features) instead."""

    def __init__(self, http: httpx.Client, sockets: Connections | None = None) -> None:
        self.http = http
        self.sockets = sockets

    @property
    def url(self) -> str:
        return str(self.http.base_url).rstrip("/")

    @contextmanager
    def failures(self, method: str, path: str) -> Iterator[None]:
        """httpx's transport failures as the client's own error, naming the URL tried."""
        try:
            yield
        except BodyCutOff as exc:
            raise ConnectionLostError(f"{method} {self.url}{path}: {exc}", self.url, exc.received) from None
        except httpx.ConnectError as exc:
            raise ConnectionFailedError(f"cannot connect to {self.url} ({_reason(exc)})", self.url) from None
        except httpx.TimeoutException as exc:
            raise ConnectionFailedError(
                f"{method} {self.url}{path} timed out ({type(exc).__name__})", self.url
            ) from None
        except httpx.TransportError as exc:
            raise ConnectionFailedError(f"{method} {self.url}{path} failed: {_reason(exc)}", self.url) from None
        except ReceiveFailed as exc:
            if isinstance(exc.__cause__, ConnectionRefusedError):
                raise ConnectionFailedError(f"cannot connect to {self.url} ({_reason(exc)})", self.url) from None
            if isinstance(exc.__cause__, TimeoutError):
                raise ConnectionFailedError(f"{method} {self.url}{path} timed out", self.url) from None
            raise ConnectionFailedError(f"{method} {self.url}{path} failed: {_reason(exc)}", self.url) from None

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.failures(method, path):
            response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise self.error(response)
        return response

    def call(self, model: type[ModelT], method: str, path: str, **kwargs: Any) -> ModelT:
        """A request whose answer is one of the contract's JSON models."""
        return self.parse(model, self.request(method, path, **kwargs))

    def parse(self, model: type[ModelT], response: httpx.Response) -> ModelT:
        try:
            return model.model_validate_json(response.content)
        except ValidationError:
            raise self.not_hsstore(response) from None

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        json: object = None,
    ) -> Iterator[Body]:
        """A response whose status is a success (else its error raised, typed), its body read inside through
        `Body.readinto`: over a socket of our own when this client made its connection, else through httpx."""
        if self.sockets is None:
            with (
                self.failures(method, path),
                self.http.stream(method, path, params=params, headers=headers, json=json) as response,
            ):
                body: Body = HttpxBody(response)
                if body.status >= 400:
                    raise self.error_of(body, method, path)
                yield body
            return
        query = f"?{urlencode(params, doseq=True)}" if params else ""
        sent = {**(headers or {})}
        content = None
        if json is not None:
            content, sent["content-type"] = dumps(json).encode(), "application/json"
        with self.failures(method, path), self.sockets.open(method, f"{self.url}{path}{query}", sent, content) as body:
            if body.status >= 400:
                raise self.error_of(body, method, path)
            yield body

    def error_of(self, body: Body, method: str, path: str) -> HsstoreError:
        response = httpx.Response(body.status, headers=body.headers, content=bytes(read_all(body)))
        response.request = httpx.Request(method, f"{self.url}{path}")
        return self.error(response)

    def exists(self, path: str, params: dict[str, str]) -> bool:
        """HEAD: True if the service has it, False on its 404 `not_found`; any other error raised, typed."""
        with self.failures("HEAD", path):
            response = self.http.head(path, params=params)
        code = response.headers.get(ERROR_HEADER)  # a HEAD answer has no body: the code travels in a header
        if response.status_code == 404 and code == ErrorCode.NOT_FOUND:
            return False
        if response.status_code >= 400:
            if code is None:
                raise self.not_hsstore(response)
            raise error_for(response.status_code, code, f"HEAD {path} answered {response.status_code} {code}")
        return True

    def error(self, response: httpx.Response) -> HsstoreError:
        try:
            detail = load_json(response.content, "the error body")["error"]
            return error_for(response.status_code, detail["code"], str(detail["message"]))
        except (ValueError, KeyError, TypeError):
            return self.not_hsstore(response)

    def not_hsstore(self, response: httpx.Response) -> NotHsstoreError:
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        return NotHsstoreError(
            f"{self.url} answered {response.request.method} {response.request.url.path} with HTTP "
            f"{response.status_code} ({kind}), not as an hsstore service does: is this the right URL?",
            response.status_code,
        )


def batch_error(index: int, item: FeatureRead, body: memoryview) -> HsstoreError:
    """The error a batch frame carries, naming the key it was for."""
    try:
        detail = load_json(bytes(body), "the error frame")["error"]
        code, message = detail["code"], str(detail["message"])
    except (ValueError, KeyError, TypeError):
        return IntegrityError(f"keys[{index}]: a malformed error frame")
    return error_for(None, code, f"keys[{index}] (prompt_hash {item.prompt_hash[:12]}…): {message}")


def _reason(exc: BaseException) -> str:
    """The innermost cause in a few words ('[Errno 111] Connection refused'), not httpx's whole chain. Only causes
    (`raise ... from`): an exception's context is whatever was being handled when it was raised, often unrelated."""
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return (str(cause) or type(cause).__name__)[:200]
