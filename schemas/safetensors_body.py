"""The safetensors body: safetensors whose header metadata carries the manifest and what part of it was served.

Encoding writes the header then the tensors' own buffers (no re-serialisation); decoding returns zero-copy views.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from schemas.featureset import LayerId
from schemas.http import MalformedBody
from schemas.json_limits import load_json
from schemas.tensors import DTYPES, SAFETENSORS_TO_DTYPE, RawTensor, TensorLayout

MAX_HEADER_BYTES = 100 * 1024 * 1024
_ALIGN = 8


@dataclass(frozen=True, slots=True)
class Decoded:
    tensors: dict[str, RawTensor]
    metadata: dict[str, str]


def encode_header(tensors: Iterable[RawTensor | TensorLayout], metadata: Mapping[str, str]) -> bytes:
    """The 8-byte length plus JSON header for `tensors` laid out in name order (their bytes are not needed)."""
    header: dict[str, object] = {"__metadata__": dict(metadata)}
    offset = 0
    for tensor in sorted(tensors, key=lambda t: t.name):
        end = offset + tensor.nbytes
        header[tensor.name] = {
            "dtype": DTYPES[tensor.dtype][2],
            "shape": list(tensor.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % _ALIGN)  # keep tensor data 8-byte aligned for zero-copy views
    return struct.pack("<Q", len(raw)) + raw


def encode_parts(tensors: Iterable[RawTensor], metadata: Mapping[str, str]) -> list[memoryview | bytes]:
    """Header then each tensor's buffer, ready to be written or streamed without joining."""
    ordered = sorted(tensors, key=lambda t: t.name)
    return [encode_header(ordered, metadata), *(t.data for t in ordered)]


def body_length(tensors: Iterable[RawTensor | TensorLayout], metadata: Mapping[str, str]) -> int:
    """The length of the body `encode` would give, from the layout alone (what HEAD answers)."""
    listed = list(tensors)
    return len(encode_header(listed, metadata)) + sum(t.nbytes for t in listed)


@dataclass(frozen=True, slots=True)
class ServedPart:
    """What a features body says it holds: which layers and tokens of the entry, and the hash of those bytes."""

    layers: list[LayerId]
    tokens: tuple[int, int]
    content_hash: str


def covers_whole(
    stored_layers: Sequence[LayerId], num_tokens: int, layers: Sequence[LayerId], tokens: tuple[int, int]
) -> bool:
    """Whether a read of `layers` and `tokens` is the whole entry (so the entry's content hash covers it)."""
    return list(layers) == list(stored_layers) and tuple(tokens) == (0, num_tokens)


def parse_served(metadata: Mapping[str, str]) -> ServedPart:
    """The `served` header metadata; MalformedBody if it is missing or malformed."""
    try:
        served = load_json(metadata["served"], "served metadata")
        start, stop = served["tokens"]
        return ServedPart(list(served["layers"]), (int(start), int(stop)), str(served["content_hash"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedBody(f"malformed served metadata: {exc!r}") from None


def served_metadata(
    manifest_json: str, layers: Sequence[LayerId], tokens: tuple[int, int], served_hash: str, full: bool
) -> dict[str, str]:
    """The header metadata of a features body: the manifest, and which layers and tokens were served with the hash
    of what was served (the content hash itself when everything was)."""
    served = {"layers": layers, "tokens": list(tokens), "content_hash": served_hash, "full": full}
    return {"manifest": manifest_json, "served": json.dumps(served, separators=(",", ":"))}


def encode(tensors: Iterable[RawTensor], metadata: Mapping[str, str]) -> bytes:
    return b"".join(encode_parts(tensors, metadata))


def decode(body: bytes | bytearray | memoryview | mmap.mmap) -> Decoded:
    """Parse a safetensors body; tensor data are views into `body`."""
    view = memoryview(body).cast("B")
    if view.nbytes < 8:
        raise MalformedBody("body shorter than the safetensors length prefix")
    (header_len,) = struct.unpack("<Q", view[:8])
    if header_len > MAX_HEADER_BYTES or 8 + header_len > view.nbytes:
        raise MalformedBody(f"header length {header_len} does not fit a {view.nbytes}-byte body")
    try:
        header = load_json(bytes(view[8 : 8 + header_len]), "the header")
    except ValueError as exc:  # not UTF-8, not JSON, or past a limit (schemas/json_limits.py)
        raise MalformedBody(f"header is not JSON within the limits: {exc}") from None
    if not isinstance(header, dict):
        raise MalformedBody("header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise MalformedBody("header __metadata__ is not an object of strings")
    data = view[8 + header_len :]
    tensors: dict[str, RawTensor] = {}
    for name, info in header.items():
        try:
            start, end = (_offset(o) for o in info["data_offsets"])
            dtype = SAFETENSORS_TO_DTYPE[info["dtype"]]
            shape = tuple(_offset(d) for d in info["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedBody(f"tensor {name!r} has a malformed header entry: {exc!r}") from None
        if not 0 <= start <= end <= data.nbytes:
            raise MalformedBody(f"tensor {name!r} offsets {start}:{end} fall outside the body")
        try:
            tensors[name] = RawTensor(name, dtype, shape, data[start:end])
        except ValueError as exc:
            raise MalformedBody(str(exc)) from None
    return Decoded(tensors=tensors, metadata=metadata)


def _offset(value: object) -> int:
    """A header's offset or dimension: a JSON integer, never a bool, a float or a string that looks like one."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a non-negative integer")
    return value
