"""A batch response (`POST /v1/features:batch`): one frame per key, in order."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from schemas.http import BY_FRAME_KIND, ERROR_FRAME, MalformedBody

# A batch response is a sequence of frames, one per key in order, each an 8-byte little-endian length, a 1-byte
# kind and then its body: a features body in a format the client accepts (its kind: `schemas.http.BODY_FORMATS`),
# or the error envelope `{"error": {"code", "message"}}` as JSON (ERROR_FRAME) for a key that could not be served
# once the response had begun; the other frames still arrive.
FRAME_PREFIX = struct.Struct("<QB")
MAX_ERROR_FRAME = 1 << 20  # an envelope is a few hundred bytes: a reader trusts no larger length for one


@dataclass(frozen=True, slots=True)
class Frame:
    kind: int
    body: memoryview


def frame_length(parts: list[memoryview | bytes]) -> int:
    return sum(memoryview(p).nbytes for p in parts)


def frame_prefix(kind: int, length: int) -> bytes:
    return FRAME_PREFIX.pack(length, kind)


def split_frames(body: bytes | bytearray | memoryview) -> list[Frame]:
    view = memoryview(body).cast("B")
    frames, offset = [], 0
    while offset < view.nbytes:
        if offset + FRAME_PREFIX.size > view.nbytes:
            raise MalformedBody("truncated frame prefix")
        length, kind = FRAME_PREFIX.unpack_from(view, offset)
        offset += FRAME_PREFIX.size
        if kind != ERROR_FRAME and kind not in BY_FRAME_KIND:
            raise MalformedBody(f"unknown frame kind {kind}")
        if offset + length > view.nbytes:
            raise MalformedBody(f"frame of {length} bytes runs past the body")
        frames.append(Frame(kind, view[offset : offset + length]))
        offset += length
    return frames
