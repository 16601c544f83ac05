"""What the client and the service agree on over HTTP besides the models: where a service listens unless told
otherwise, and the formats a features body comes in (their layouts live in chunk_body and safetensors_body, a batch's
framing in batch_frames, the dataset index's in datasets). Only the standard library: the CLI reads this first.

A format is one row of BODY_FORMATS: its name, its media type (what a client lists in Accept and a response's
Content-Type names) and its frame kind (what a batch response's frame prefix names). The service sends the first
format a client's Accept lists that it can make for the entry (safetensors it always can); the client reads each
body by the format its response or frame names. A new format is a row here, the service's body for it
(service/core/read/reader.py) and the client's receiver (client/receive.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

DEFAULT_URL = "http://127.0.0.1:8000"  # Settings' default host and port
FRAMES_MEDIA_TYPE = "application/x-hsstore-frames"  # a batch: per key, a u64 length, a u8 kind, then a body or an error
SERVED_HASH_HEADER = "X-Hsstore-Served-Hash"  # sha256 of the tensors a safetensors part holds, as content_hash
ERROR_FRAME = 1  # a batch frame holding the error envelope of a key that could not be served once the response began


class MalformedBody(ValueError):
    """The bytes are not a well-formed body of the format they claim (safetensors, chunks, a batch's frames)."""


class BodyFormat(StrEnum):
    SAFETENSORS = "safetensors"  # the tensors decoded by the service, the manifest in the header metadata
    CHUNKS = "chunks"  # the stored chunks as they lie, with their index (schemas.chunk_body)


@dataclass(frozen=True, slots=True)
class FormatSpec:
    format: BodyFormat
    media_type: str
    frame_kind: int


BODY_FORMATS = {
    spec.format: spec
    for spec in (
        FormatSpec(BodyFormat.SAFETENSORS, "application/octet-stream", 0),
        FormatSpec(BodyFormat.CHUNKS, "application/x-hsstore-chunks", 2),
    )
}
FALLBACK = BodyFormat.SAFETENSORS  # what every service can send for every entry, whatever the client accepts
BY_MEDIA_TYPE = {spec.media_type: spec for spec in BODY_FORMATS.values()}
BY_FRAME_KIND = {spec.frame_kind: spec for spec in BODY_FORMATS.values()}


def accept_header(preferred: BodyFormat) -> str:
    """What a client that would rather have `preferred` lists in Accept: it, then the fallback."""
    wanted = dict.fromkeys((preferred, FALLBACK))
    return ", ".join(BODY_FORMATS[name].media_type for name in wanted)


def accepted(accept: str | None) -> list[BodyFormat]:
    """The formats an Accept header lists, in its order, then the fallback (a client that lists none of ours, or
    `*/*`, gets it)."""
    listed = [part.split(";", 1)[0].strip() for part in (accept or "").split(",")]
    named = [BY_MEDIA_TYPE[media].format for media in listed if media in BY_MEDIA_TYPE]
    return list(dict.fromkeys([*named, FALLBACK]))


def format_of(content_type: str | None) -> BodyFormat:
    """The format a response's Content-Type names (the fallback for one that names none of ours)."""
    spec = BY_MEDIA_TYPE.get((content_type or "").split(";", 1)[0].strip())
    return spec.format if spec is not None else FALLBACK
