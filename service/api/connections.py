"""How long a connection may take to say what it wants: uvicorn's HTTP protocol with a deadline on the request head.

uvicorn closes a kept-alive connection after `timeout_keep_alive` seconds without a byte, but a connection that keeps
sending (a header a byte at a time, slowloris) or never sends at all after it opened is held for as long as the
client likes: 20 such connections held a soak's server for all of its 30 s. Here every connection must complete a
request head within `header_timeout_s` of opening, and again of each response it was sent; otherwise it gets a 408 in
the usual error envelope and is closed. A request's body and the response are not timed here (a large upload or a
slow reader is the body-size limit's and the flow control's business).

uvicorn builds its protocol from a class it imports by name (`PROTOCOL`), in every serving process, so the deadline
reaches it through the environment (`HEADER_TIMEOUT_ENV`, which the settings read as well).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from schemas.errors import ERROR_HEADER, ErrorBody, ErrorCode, ErrorDetail
from service.settings import Settings

log = logging.getLogger("hsstore")

PROTOCOL = "service.api.connections:HeadDeadlineProtocol"
HEADER_TIMEOUT_ENV = f"{Settings.model_config['env_prefix']}HEADER_TIMEOUT_S"  # the setting's own variable
DEFAULT_HEADER_TIMEOUT_S = Settings.model_fields["header_timeout_s"].default


def _timeout_response(seconds: float) -> bytes:
    body = ErrorBody(
        error=ErrorDetail(
            code=ErrorCode.REQUEST_TIMEOUT,
            message=f"no whole request head within {seconds:g} s: the connection is closed",
        )
    )
    payload = json.dumps(body.model_dump(mode="json")).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\n{ERROR_HEADER}: {ErrorCode.REQUEST_TIMEOUT}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + payload


class HeadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline from each wait for a request head to the head's end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = float(os.environ.get(HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S))
        self._head_deadline: asyncio.TimerHandle | None = None

    def _await_head(self) -> None:
        self._end_wait()
        self._head_deadline = self.loop.call_later(self.header_timeout_s, self._head_overdue)

    def _end_wait(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _answering(self) -> bool:
        """A request is in hand: its head parsed, its response not yet whole (or one pipelined behind it)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _head_overdue(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing() or self._answering():
            return
        log.warning("closed %s: no whole request head within %g s", _peer(self.client), self.header_timeout_s)
        self.transport.write(_timeout_response(self.header_timeout_s))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's own ignore
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._end_wait()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the request parsed last is the newest (a pipelined one may have started just now): while it is unanswered
        # the next head is not awaited yet
        if not self.transport.is_closing() and not self._answering():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_wait()
        super().connection_lost(exc)


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a connection"
