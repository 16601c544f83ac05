"""The client's one seam to the service: requests over an `httpx.Client` (a socket, or an in-process ASGI app in
tests), failures turned into the client's own errors, bodies streamed into one buffer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from client.errors import ConnectionFailed, HsstoreError, IntegrityError, NotHsstoreError, error_for
from schemas.api import BatchItem
from schemas.errors import ERROR_HEADER, ErrorCode

ModelT = TypeVar("ModelT", bound=BaseModel)


class Transport:
    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    @property
    def url(self) -> str:
        return str(self.http.base_url).rstrip("/")

    @contextmanager
    def failures(self, method: str, path: str) -> Iterator[None]:
        """httpx's transport failures as the client's own error, naming the URL tried."""
        try:
            yield
        except httpx.ConnectError as exc:
            raise ConnectionFailed(f"cannot connect to {self.url} ({_reason(exc)})", self.url) from None
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(f"{method} {self.url}{path} timed out ({type(exc).__name__})", self.url) from None
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{method} {self.url}{path} failed: {_reason(exc)}", self.url) from None

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
    def open(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """A streamed response whose status is a success (else its error raised, typed); read it inside."""
        with self.failures(method, path), self.http.stream(method, path, **kwargs) as response:
            if response.status_code >= 400:
                response.read()
                raise self.error(response)
            yield response

    def receive(self, method: str, path: str, **kwargs: Any) -> bytearray | bytes:
        """The body, streamed into one buffer sized by Content-Length (no list of chunks joined afterwards)."""
        with self.open(method, path, **kwargs) as response:
            return self.body(response)

    def body(self, response: httpx.Response) -> bytearray | bytes:
        length = content_length(response)
        if length is None:  # grown as it arrives: httpx's read() joins a list of pieces, measured 10x the CPU
            grown = bytearray()
            for chunk in response.iter_raw():
                grown += chunk
            return grown
        body = bytearray(length)
        filled = fill(memoryview(body), response.iter_raw())
        if filled != len(body):
            raise IntegrityError(f"received {filled} of {len(body)} bytes")
        return body

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
            detail = response.json()["error"]
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


def fill(view: memoryview, pieces: Iterable[bytes], on_piece: Callable[[int], None] | None = None) -> int:
    """Copy `pieces` one after another into `view` from its start; how many bytes came. IntegrityError if they run
    past its end; `on_piece(filled)` after each (what lets a decoder start on what has arrived)."""
    filled = 0
    for piece in pieces:
        end = filled + memoryview(piece).nbytes
        if end > view.nbytes:
            raise IntegrityError(f"the body runs past its {view.nbytes} bytes")
        view[filled:end] = piece
        filled = end
        if on_piece is not None:
            on_piece(filled)
    return filled


def content_length(response: httpx.Response) -> int | None:
    length = response.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


def batch_error(index: int, item: BatchItem, body: memoryview) -> HsstoreError:
    """The error a batch frame carries, naming the key it was for."""
    try:
        detail = json.loads(bytes(body))["error"]
        code, message = detail["code"], str(detail["message"])
    except (ValueError, KeyError, TypeError):
        return IntegrityError(f"keys[{index}]: a malformed error frame")
    return error_for(None, code, f"keys[{index}] (prompt_hash {item.prompt_hash[:12]}…): {message}")


def _reason(exc: httpx.TransportError) -> str:
    """The innermost cause in a few words ('[Errno 111] Connection refused'), not httpx's whole chain."""
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    return (str(cause) or type(cause).__name__)[:200]
