"""The deadline on request heads (service/api/connections.py), against a real uvicorn server on loopback running the
protocol `hsstore serve` runs. The deadline is set short here; what a client sees is what it would see at 10 s."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from service.api.connections import HEADER_TIMEOUT_ENV
from tests.conftest import LiveServer

DEADLINE = 0.6
# The server's clock starts when it accepts, which may come before the client's `start`, and asyncio runs a timer up to
# its clock's resolution early: a close this much before DEADLINE (as the client counts) is still at the deadline.
EARLY = 0.05


@pytest.fixture
def port(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv(HEADER_TIMEOUT_ENV, str(DEADLINE))  # read by each connection as it opens
    with LiveServer(app) as url:
        yield int(url.rsplit(":", 1)[1])


def _until_closed(
    conn: socket.socket, trickle: bytes = b"", every: float = 0.1, limit: float = 10
) -> tuple[bytes, float]:
    """Send `trickle` a byte every `every` s until the server closes the connection: what it answered, and after
    how long."""
    conn.settimeout(every)
    start, answer = time.monotonic(), b""
    for byte in [trickle[i : i + 1] for i in range(len(trickle))] or [b""] * int(limit / every):
        try:
            if byte:
                conn.send(byte)
            while piece := conn.recv(65536):
                answer += piece
            return answer, time.monotonic() - start  # the end of the stream: closed
        except TimeoutError:
            continue
        except OSError:  # reset while sending: closed
            return answer, time.monotonic() - start
        if time.monotonic() - start > limit:
            break
    raise AssertionError(f"still open after {limit} s (answered {answer[:80]!r})")


def _assert_408(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"x-hsstore-error: request_timeout" in head.lower() and b"connection: close" in head.lower()
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_a_head_sent_a_byte_at_a_time_gets_408_and_is_closed_at_the_deadline(port: int) -> None:
    slow = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200  # never ends within the deadline
    with socket.create_connection(("127.0.0.1", port)) as conn:
        answer, after = _until_closed(conn, slow)
    _assert_408(answer)
    assert DEADLINE - EARLY <= after < DEADLINE + 1.5, after


def test_a_connection_that_never_sends_is_closed_at_the_deadline(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        answer, after = _until_closed(conn)
    _assert_408(answer)
    assert DEADLINE - EARLY <= after < DEADLINE + 1.5, after


def test_a_kept_alive_connection_has_the_deadline_again_for_its_next_head(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        conn.settimeout(5)
        first = conn.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 "), first[:100]
        answer, after = _until_closed(conn, b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200)
    _assert_408(answer)
    assert after < DEADLINE + 1.5, after


def test_the_deadline_ends_with_the_head_a_slow_body_and_a_long_request_are_answered(port: int) -> None:
    """Only the head is timed: a body that takes three deadlines to arrive is read, the request answered 200."""
    body = json.dumps({"samples": [{"text": "a body sent slowly, then extracted"}]}).encode()
    head = (
        f"POST /v1/extract HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(head)
        for piece in (body[:10], body[10:20], body[20:]):
            time.sleep(DEADLINE)
            conn.sendall(piece)
        conn.settimeout(60)
        answer = conn.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
