"""A TCP proxy on 127.0.0.1 that flips one bit of the first response body on each connection: corruption in
transit for clients that read their own sockets (no httpx transport to wrap). With `cut`, it closes the connection at
that byte instead: a service that died mid-response, as its clients see it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class FlippingProxy:
    def __init__(self, upstream: tuple[str, int], position: Callable[[int | None], int], cut: bool = False) -> None:
        """`position(n)`: which byte to flip (or cut at) of a response body of n bytes (the body after the headers;
        None: a chunked body, its length unknown)."""
        self.upstream, self.position, self.cut = upstream, position, cut
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=_pipe, args=(downstream, upstream, None), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, downstream, self.position, self.cut), daemon=True).start()


def _pipe(
    source: socket.socket, sink: socket.socket, position: Callable[[int | None], int] | None, cut: bool = False
) -> None:
    """Copy `source` to `sink`; with `position`, flip one bit of the first response's body (or close there)."""
    seen, head, at = 0, b"", None  # bytes passed on; the headers until their end came; the offset to flip
    try:
        while data := bytearray(source.recv(1 << 16)):
            if position is not None and at is None:
                head += data
                end = head.find(b"\r\n\r\n")
                if end >= 0:
                    lines = head[:end].decode("latin-1").lower().split("\r\n")
                    lengths = [int(line.split(":")[1]) for line in lines if line.startswith("content-length")]
                    at = end + 4 + position(lengths[0] if lengths else None)
            if at is not None and seen <= at < seen + len(data):
                if cut:
                    sink.sendall(data[: at - seen])
                    for end in (sink, source):  # at once: the other direction's thread still holds them open
                        end.shutdown(socket.SHUT_RDWR)
                    return
                data[at - seen] ^= 0x10
            seen += len(data)
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()
        source.close()
