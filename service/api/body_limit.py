"""Refuse request bodies over the configured size with 413, before they are parsed."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import TOO_LARGE


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            body = json.dumps({"error": {"code": TOO_LARGE, "message": self._message()}}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
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
                if seen > self.max_bytes:
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited_receive, send)

    def _message(self) -> str:
        return f"request body over the limit of {self.max_bytes} bytes"
