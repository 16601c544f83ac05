"""Response bodies read into the caller's buffer: `Body.readinto` is the one way the client takes bytes off the wire.

Over a socket the body comes through the standard library's `http.client`, whose `readinto` has the kernel copy the
bytes straight into our buffer with the GIL released. httpx instead parses each 64 KiB piece in Python and copies it
three times under the GIL, which is what held one training process at ~0.7 GB/s whatever its cores: measured here
(2 cores, 107 MB chunk bodies, 4 threads), receiving cost 0.14 client CPU-s/GB this way against ~1.5 through httpx,
and verified reads went from 0.5 to 1.0-1.4 GB/s. An `httpx.Client` handed in by the caller (an in-process ASGI app
in tests) is read through the same interface (`HttpxBody`), so the decoders above never know which one ran.
"""

from __future__ import annotations

import http.client
import queue
import socket
import ssl
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from client.errors import IntegrityError

STEP = 1 << 20  # bytes asked of the socket per call: a decoder starts on each chunk as soon as its bytes are in


class ReceiveFailed(Exception):
    """A socket or HTTP failure of this module's own connections (its cause is the OSError or http.client error),
    kept apart from OSErrors the caller's own code may raise while it reads (a cache write on a full disk)."""


class BodyCutOff(ReceiveFailed):
    """The connection failed after the response began: `received` bytes of its body had come."""

    def __init__(self, received: int, cause: BaseException) -> None:
        self.received = received
        if isinstance(cause, TimeoutError | httpx.TimeoutException):
            told = f"the response stalled after {received} bytes of the body (timed out)"
        else:
            ended = isinstance(cause, http.client.IncompleteRead | ValueError)
            how = "it ended early" if ended else type(cause).__name__
            told = f"the connection closed mid-response after {received} bytes of the body ({how})"
        super().__init__(told)


# What reading a body raises when its connection dies: http.client's own errors, the socket's, and a ValueError where
# a chunked body is cut inside a chunk-size line (http.client parses the empty line as hexadecimal).
_CUT = (OSError, http.client.HTTPException, ValueError)


class Body(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Names in lower case."""
        ...

    def readinto(self, view: memoryview) -> int:
        """Up to `view.nbytes` bytes of the body into `view`; 0 once it has ended."""
        ...


def content_length(body: Body) -> int | None:
    length = body.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


def fill(view: memoryview, body: Body, on_piece: Callable[[int], None] | None = None) -> int:
    """Read `body` into `view` from its start until `view` is full or the body ends; how many bytes came.
    `on_piece(filled)` after each read (what lets a decoder start on what has arrived)."""
    filled = 0
    while filled < view.nbytes:
        got = body.readinto(view[filled : filled + STEP])
        if not got:
            break
        filled += got
        if on_piece is not None:
            on_piece(filled)
    return filled


def read_all(body: Body) -> bytearray:
    """The whole body: into one buffer of its Content-Length, else grown as it arrives."""
    length = content_length(body)
    if length is not None:
        buffer = bytearray(length)
        filled = fill(memoryview(buffer), body)
        if filled != length:
            raise IntegrityError(f"received {filled} of {length} bytes")
        if at_end(body):
            return buffer
        raise IntegrityError(f"the body runs past its {length} bytes")
    grown, piece = bytearray(), bytearray(STEP)
    while got := body.readinto(memoryview(piece)):
        grown += memoryview(piece)[:got]
    return grown


def at_end(body: Body) -> bool:
    return body.readinto(memoryview(bytearray(1))) == 0


class Exactly:
    """The next `n` bytes of a body (a batch's frames, one after another), as a body of its own."""

    def __init__(self, body: Body, n: int) -> None:
        self.status, self.headers, self._body, self._left = body.status, body.headers, body, n

    def readinto(self, view: memoryview) -> int:
        if not self._left:
            return 0
        got = self._body.readinto(view[: self._left])
        if not got:
            raise IntegrityError("the body ended inside a frame")
        self._left -= got
        return got


def read_exactly(body: Body, n: int) -> bytearray:
    buffer = bytearray(n)
    if fill(memoryview(buffer), body) != n:
        raise IntegrityError(f"the body ended before its {n} bytes")
    return buffer


class Buffered:
    """A body already in memory, read as any other: what a response without a Content-Length becomes (a proxy's
    chunked encoding), so that every format's receiver is handed a body and its length."""

    def __init__(self, data: bytearray, like: Body) -> None:
        self.status, self.headers = like.status, like.headers
        self._data, self._at = memoryview(data), 0

    def readinto(self, view: memoryview) -> int:
        n = min(view.nbytes, self._data.nbytes - self._at)
        view[:n] = self._data[self._at : self._at + n]
        self._at += n
        return n


class HttpxBody:
    """A streamed httpx response read through `readinto` (for an `httpx.Client` the caller handed in)."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = {k.lower(): v for k, v in response.headers.items()}
        self._pieces = response.iter_raw()
        self._left = memoryview(b"")
        self.received = 0

    def readinto(self, view: memoryview) -> int:
        while not self._left.nbytes:
            try:
                piece = next(self._pieces, None)
            except httpx.TransportError as exc:
                raise BodyCutOff(self.received, exc) from exc
            if piece is None:
                return 0
            self._left = memoryview(piece).cast("B")
        n = min(view.nbytes, self._left.nbytes)
        view[:n] = self._left[:n]
        self._left = self._left[n:]
        self.received += n
        return n


class SocketBody:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self._response = response
        self.received = 0

    def readinto(self, view: memoryview) -> int:
        try:
            n = self._response.readinto(view)
        except _CUT as exc:
            # what this call had read before the end came is in an IncompleteRead
            partial = len(exc.partial) if isinstance(exc, http.client.IncompleteRead) else 0
            raise BodyCutOff(self.received + partial, exc) from exc
        if not n and view.nbytes and self._response.length:  # the end came with bytes of its Content-Length owed
            cause = http.client.IncompleteRead(b"", self._response.length)
            raise BodyCutOff(self.received, cause) from cause
        self.received += n
        return n


# What a reused keep-alive connection raises when the server closed it meanwhile: sent again once, on a fresh one.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class Connections:
    """Keep-alive `http.client` connections per origin, each used by one request at a time, as many as are busy
    at once (a thread pool's worth). A connection goes back to the pool only when its response was read to the end."""

    def __init__(self, timeout: float, headers: Mapping[str, str] | None = None) -> None:
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._idle: dict[tuple[str, str, int], queue.SimpleQueue[http.client.HTTPConnection]] = {}

    @contextmanager
    def open(
        self, method: str, url: str, headers: Mapping[str, str] | None = None, content: bytes | None = None
    ) -> Iterator[SocketBody]:
        """The response to one request on `url` (absolute), its body read inside. A failure of the connection is
        `ReceiveFailed`, for the caller to name."""
        parts = urlsplit(url)
        origin = (parts.scheme, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        sent = {**self.headers, **(headers or {})}
        idle = self._idle.setdefault(origin, queue.SimpleQueue())
        connection: http.client.HTTPConnection | None = None
        try:
            try:
                connection, reused = self._take(idle, origin)
                try:
                    connection.request(method, target, body=content, headers=sent)
                    response = connection.getresponse()
                except _STALE:
                    if not reused:
                        raise
                    connection.close()
                    connection = self._connect(origin)
                    connection.request(method, target, body=content, headers=sent)
                    response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise ReceiveFailed(str(exc) or type(exc).__name__) from exc
            yield SocketBody(response)
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        if response.isclosed() and not response.will_close:  # read to its end, and the server keeps it open
            idle.put(connection)
        else:
            connection.close()

    def _take(
        self, idle: queue.SimpleQueue[http.client.HTTPConnection], origin: tuple[str, str, int]
    ) -> tuple[http.client.HTTPConnection, bool]:
        try:
            return idle.get_nowait(), True
        except queue.Empty:
            pass
        return self._connect(origin), False  # outside the handler: a refusal is not "during handling of Empty"

    def _connect(self, origin: tuple[str, str, int]) -> http.client.HTTPConnection:
        scheme, host, port = origin
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=ssl.create_default_context())
        connection = http.client.HTTPConnection(host, port, timeout=self.timeout)
        connection.connect()
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small requests go out at once
        return connection

    def close(self) -> None:
        for idle in self._idle.values():
            while True:
                try:
                    idle.get_nowait().close()
                except queue.Empty:
                    break
