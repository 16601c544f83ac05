"""The chunk wire format: the stored chunks of an entry sent exactly as they lie in the store, decoded and verified by
the client, so the service spends next to nothing per byte.

    "HSCK"  u8 version  u32 header length   the header (JSON)   u32 crc32c of everything before it
    then each array's chunks back to back, as the header's index lists them

Each chunk is sent as stored: its blosc frame, then the crc32c of that frame (Zarr's `crc32c` codec). The header
carries the manifest (with every chunk's write-time digest), which part of the entry is served, and per array its
codec and the index of the chunks sent: (position in the chunk grid, offset in the data, length, digest). A client
checks the header's crc32c, that the index names exactly the chunks the served part needs with the digests the
manifest recorded, each chunk's crc32c, and each decoded chunk's digest, then trims the chunks to the part.

Negotiated (`schemas.http.BODY_FORMATS`): a client that lists the chunks' media type in its Accept header gets this;
any other gets safetensors (`schemas.safetensors_body`), as does every entry written before chunk digests were recorded.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from schemas.chunks import crc32c, crc_ok, entry_digest, grid, touched
from schemas.featureset import LayerId
from schemas.http import MalformedBody
from schemas.manifest import LAYER_ARRAYS, Manifest

MAGIC, VERSION = b"HSCK", 1
_PREFIX = struct.Struct("<4sBI")
_CRC = 4
MAX_HEADER_BYTES = 64 * 1024 * 1024


class SentArray(BaseModel):
    """One array of the entry: its stored geometry, the part of it served, and the index of the chunks sent."""

    model_config = ConfigDict(frozen=True)

    name: str
    dtype: str  # the contract's dtype name (bf16 travels as its 2-byte patterns)
    shape: list[int]  # the stored array's
    chunk: list[int]
    codec: Literal["blosc"]  # every store codec is a blosc configuration; each frame names its own
    rows: tuple[int, int]  # the served range along axis 0
    axis1: list[int] | None = None  # the served positions along axis 1 (None: all)
    chunks: list[tuple[int, int, int, str]]  # (position in the chunk grid, offset in the data, length, digest)

    def wanted(self) -> list[Sequence[int]]:
        """The selected indices per dimension."""
        dims: list[Sequence[int]] = [range(*self.rows)]
        if len(self.shape) > 1:
            dims.append(self.axis1 if self.axis1 is not None else range(self.shape[1]))
        dims += [range(n) for n in self.shape[2:]]
        return dims

    def served_shape(self) -> tuple[int, ...]:
        return tuple(len(w) for w in self.wanted())

    def needed(self) -> list[int]:
        """The chunk positions the served part touches, in C order: exactly what the index must list."""
        per_dim = [[coordinate for coordinate, _, _ in dim] for dim in touched(self.wanted(), self.chunk)]
        chunk_grid = grid(self.shape, self.chunk)
        positions = [0]
        for coordinates, size in zip(per_dim, chunk_grid, strict=True):
            positions = [p * size + c for p in positions for c in coordinates]
        return positions if all(per_dim) else []


class ChunkHeader(BaseModel):
    model_config = ConfigDict(frozen=True)

    manifest: str  # the manifest JSON, as the safetensors body's metadata carries it
    layers: list[LayerId]  # the layers served, in order along axis 1 of hidden_states
    tokens: tuple[int, int]
    full: bool
    arrays: list[SentArray]
    data_bytes: int

    def checked(self, manifest: Manifest) -> None:
        """MalformedBody unless the header is consistent with the manifest it carries: the arrays it recorded,
        their shapes and chunk shapes, exactly the chunks the served part needs, laid out back to back, each with
        the digest recorded when it was written."""
        if manifest.chunks_digest != entry_digest({n: t.chunks for n, t in manifest.tensors.items()}):
            raise MalformedBody("the manifest's chunk digests are not the ones its entry digest covers")
        if sorted(a.name for a in self.arrays) != sorted(manifest.tensors):
            raise MalformedBody("the arrays sent are not the entry's arrays")
        stored_layers = list(manifest.featureset.layers)
        if any(layer not in stored_layers for layer in self.layers):
            raise MalformedBody("the layers served are not the entry's")
        layer_positions = [stored_layers.index(layer) for layer in self.layers]
        offset = 0
        for array in self.arrays:
            info = manifest.tensors[array.name]
            if info.chunks is None or array.dtype != info.dtype or array.shape != info.shape:
                raise MalformedBody(f"{array.name}: not the array that was written")
            if array.chunk != info.chunks.shape:
                raise MalformedBody(f"{array.name}: not the chunk shape it was written with")
            if tuple(array.rows) != tuple(self.tokens) or not 0 <= array.rows[0] <= array.rows[1] <= array.shape[0]:
                raise MalformedBody(f"{array.name}: rows {array.rows} are not the tokens served")
            if array.name in LAYER_ARRAYS:
                positions = array.axis1 if array.axis1 is not None else list(range(array.shape[1]))
                if positions != layer_positions:
                    raise MalformedBody(f"{array.name}: the positions sent are not the layers served")
            if array.axis1 is not None and (
                len(array.shape) < 2 or not all(0 <= p < array.shape[1] for p in array.axis1)
            ):
                raise MalformedBody(f"{array.name}: axis-1 positions fall outside the array")
            if [at for at, _, _, _ in array.chunks] != array.needed():
                raise MalformedBody(f"{array.name}: the index does not list the chunks the served part needs")
            for at, start, length, digest in array.chunks:
                if start != offset or length <= _CRC or digest != info.chunks.digests[at]:
                    raise MalformedBody(f"{array.name}: index entry for chunk {at} is not what was written")
                offset += length
        if offset != self.data_bytes:
            raise MalformedBody(f"the index covers {offset} bytes of data, the header says {self.data_bytes}")


def encode_header(header: ChunkHeader) -> bytes:
    raw = header.model_dump_json().encode()
    head = _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw
    return head + crc32c(head)


def header_length(view: memoryview) -> int | None:
    """How many bytes the prefix, header and its crc take, once the prefix has arrived (else None)."""
    if view.nbytes < _PREFIX.size:
        return None
    magic, version, length = _PREFIX.unpack_from(view)
    length = int(length)
    if magic != MAGIC or version != VERSION:
        raise MalformedBody(f"not an hsstore chunk body (magic {magic!r}, version {version})")
    if length > MAX_HEADER_BYTES:
        raise MalformedBody(f"header length {length} exceeds the limit")
    return _PREFIX.size + length + _CRC


def decode_header(view: memoryview) -> tuple[ChunkHeader, Manifest, int]:
    """The header, its manifest (checked against each other) and where the data begins."""
    size = header_length(view)
    if size is None or view.nbytes < size:
        raise MalformedBody("body shorter than its header")
    if not crc_ok(view[:size]):
        raise MalformedBody("header checksum mismatch")
    try:
        header = ChunkHeader.model_validate_json(bytes(view[_PREFIX.size : size - _CRC]))
        manifest = Manifest.model_validate_json(header.manifest)
    except ValidationError as exc:
        raise MalformedBody(f"malformed header: {exc.error_count()} errors") from None
    try:
        header.checked(manifest)
    except MalformedBody:
        raise
    except (IndexError, KeyError, TypeError, ValueError) as exc:  # a header whose parts do not fit one another
        raise MalformedBody(f"an inconsistent header: {exc}") from None
    return header, manifest, size


class DirectEntry(BaseModel):
    """One entry for a client to read straight from the object store: the chunk header (manifest, part, and the
    index as a chunk body would lay the chunks out), per array a presigned URL of its shard, and where in the shard
    each chunk lies. The client fetches the chunks with ranged GETs into a body's data layout and decodes and
    verifies them exactly as a chunk body."""

    header: ChunkHeader
    urls: dict[str, str]
    shard_offsets: dict[str, list[int]]  # per array, where each chunk of the header's index lies in its shard
    expires_at: str


class DirectEntries(BaseModel):
    entries: list[DirectEntry]
