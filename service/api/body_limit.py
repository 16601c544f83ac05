"""Refuse request bodies over the configured size with 413, before they are parsed."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import ERROR_HEADER, ErrorCode


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, overrides: dict[str, int] | None = None) -> None:
        self.app = app
        self.default_max = max_bytes
        self.overrides = overrides or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.overrides.get(scope.get("path", ""), self.default_max)
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            body = json.dumps({"error": {"code": ErrorCode.TOO_LARGE, "message": self._message(limit)}}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 413,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"connection", b"close"),
                        (ERROR_HEADER.lower().encode(), ErrorCode.TOO_LARGE.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        seen = 0

        async def limited_receive() -> Message:
            # Bodies without a Content-Length (chunked) are counted as they arrive; the HTTPException reaches the
            # one error mapping as a 413.
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, self._message(limit))
            return message

        await self.app(scope, limited_receive, send)

    @staticmethod
    def _message(limit: int) -> str:
        return f"request body over the limit of {limit} bytes"
