"""A dataset snapshot: a named, immutable, content-addressed list of entries, compact enough for millions.

A training run that names a dataset id reads exactly those versions again later, and its loaders read one small
index per process instead of paging through the whole listing (full manifests, ~4 KB each) in every DataLoader
worker of every rank at every epoch. Layout (`encode`): `"HSDS"`, `u8` version 1, `u32` header length, a JSON
header (name, creation time, the distinct (model revision, backend, featureset) triples, count), then one 70-byte
record per entry in listing order: prompt hash (32 bytes), content hash (32 bytes), tokens (`u32`), the index of
its triple (`u16`). The id is `sha256:` over those bytes: a reader checks the bytes it got against the id it asked
for, and the same entries in the same order always give the same id.
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schemas.json_limits import load_json
from schemas.keys import WIRE_NAMED, FeatureKey, FeaturesetId

MAGIC, VERSION = b"HSDS", 1
_PREFIX = struct.Struct("<4sBI")
PREFIX_SIZE = _PREFIX.size
_FLUSH = 1 << 20  # records written a MB at a time
# raw digests as bytes, not numpy "S32": that strips trailing zero bytes
RECORD = np.dtype([("prompt_hash", "u1", (32,)), ("content_hash", "u1", (32,)), ("tokens", "<u4"), ("key", "<u2")])
MEDIA_TYPE = "application/x-hsstore-dataset"
ID_HEADER = "X-Hsstore-Dataset-Id"  # the id of the index a response carries


class DatasetError(ValueError):
    """Bytes that are not a dataset index, or not the one asked for."""


class Triple(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", **WIRE_NAMED)  # the index file names it as the wire does

    model_revision: str
    backend: str
    featureset_id: FeaturesetId


class DatasetHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    created_at: str
    triples: list[Triple]
    count: int = Field(ge=0)


@dataclass(frozen=True)
class DatasetIndex:
    """A decoded index: its header and the records (a numpy structured array, `RECORD`)."""

    header: DatasetHeader
    records: np.ndarray
    dataset_id: str

    def __len__(self) -> int:
        return len(self.records)

    @property
    def tokens(self) -> int:
        return int(self.records["tokens"].sum(dtype=np.int64))

    def key(self, position: int) -> FeatureKey:
        """The entry at `position`, pinned to its version by content hash."""
        record = self.records[position]
        triple = self.header.triples[int(record["key"])]
        return FeatureKey(
            prompt_hash=record["prompt_hash"].tobytes().hex(),
            model_revision=triple.model_revision,
            backend=triple.backend,
            featureset_id=triple.featureset_id,
            content_hash="sha256:" + record["content_hash"].tobytes().hex(),
        )


def dataset_id(data: bytes | memoryview) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_dataset_id(text: str) -> bool:
    hexdigest = text.removeprefix("sha256:")
    return text.startswith("sha256:") and len(hexdigest) == 64 and all(c in "0123456789abcdef" for c in hexdigest)


# A version as an index names it: prompt hash, content hash ("sha256:..."), tokens, model revision, backend, featureset
IndexRow = tuple[str, str, int, str, str, str]
_RECORD = struct.Struct("<IH")  # a record's tokens and triple, after its two 32-byte hashes


@dataclass(frozen=True)
class Spooled:
    """What `spool` wrote: the records' triples in order of first use, how many records, and their tokens."""

    triples: list[Triple]
    count: int
    tokens: int


def spool(rows: Iterable[IndexRow], out: BinaryIO) -> Spooled:
    """Write the records of `rows` to `out` as they come (an index of 10^7 entries never in memory at once)."""
    triples: dict[tuple[str, str, str], int] = {}
    pending, count, tokens = bytearray(), 0, 0
    for prompt, content, size, *parts in rows:
        triple = triples.setdefault((parts[0], parts[1], parts[2]), len(triples))
        if triple >= 2**16:
            raise DatasetError("a dataset spans at most 65,536 (model revision, backend, featureset) triples")
        pending += bytes.fromhex(prompt) + bytes.fromhex(content.removeprefix("sha256:")) + _RECORD.pack(size, triple)
        count, tokens = count + 1, tokens + size
        if len(pending) >= _FLUSH:
            out.write(pending)
            pending.clear()
    out.write(pending)
    named = [Triple(model_revision=r, backend=b, featureset_id=f) for r, b, f in triples]
    return Spooled(named, count, tokens)


def prefix(name: str, created_at: str, spooled: Spooled) -> bytes:
    """What comes before the records: the magic, the version and the header (which says how many follow)."""
    header = DatasetHeader(name=name, created_at=created_at, triples=spooled.triples, count=spooled.count)
    raw = header.model_dump_json().encode()
    return _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw


def row_of(key: FeatureKey, tokens: int) -> IndexRow:
    if key.content_hash is None or key.model_revision is None or key.backend is None or key.featureset_id is None:
        raise DatasetError("a dataset names whole versions (every key part and the content hash)")
    return key.prompt_hash, key.content_hash, tokens, key.model_revision, key.backend, key.featureset_id


def encode(name: str, created_at: str, keys: list[tuple[FeatureKey, int]]) -> bytes:
    """The index of `keys` (each pinned by content hash, with its token count), in this order."""
    records = io.BytesIO()
    spooled = spool((row_of(key, tokens) for key, tokens in keys), records)
    return prefix(name, created_at, spooled) + records.getvalue()


def header_size(start: bytes) -> int:
    """How many bytes an index's magic, version and header take, from its first `PREFIX_SIZE` bytes."""
    if len(start) < _PREFIX.size:
        raise DatasetError("too short for a dataset index")
    magic, version, size = _PREFIX.unpack_from(start)
    if magic != MAGIC or version != VERSION:
        raise DatasetError("not a dataset index of version 1")
    return int(_PREFIX.size + size)


def read_header(head: bytes) -> DatasetHeader:
    """The header of an index whose first `header_size` bytes are `head`."""
    try:
        return DatasetHeader.model_validate(load_json(head[_PREFIX.size :], "the header"))
    except ValueError as exc:
        raise DatasetError(f"a malformed dataset header: {exc}") from None


def decode(data: bytes | memoryview, expected_id: str | None = None) -> DatasetIndex:
    """An index from its bytes; DatasetError if they are not one, or do not hash to `expected_id`."""
    view = memoryview(data).cast("B")
    actual = dataset_id(view)
    if expected_id is not None and actual != expected_id:
        raise DatasetError(f"the dataset's bytes hash to {actual}, not {expected_id}")
    if view.nbytes < _PREFIX.size:
        raise DatasetError("too short for a dataset index")
    magic, version, size = _PREFIX.unpack_from(view)
    if magic != MAGIC or version != VERSION or _PREFIX.size + size > view.nbytes:
        raise DatasetError("not a dataset index of version 1")
    try:
        header = DatasetHeader.model_validate(load_json(bytes(view[_PREFIX.size : _PREFIX.size + size]), "the header"))
    except ValueError as exc:
        raise DatasetError(f"a malformed dataset header: {exc}") from None
    body = view[_PREFIX.size + size :]
    if body.nbytes != header.count * RECORD.itemsize:
        raise DatasetError(f"{body.nbytes} bytes of records for {header.count} entries")
    records = np.frombuffer(body, dtype=RECORD)
    if header.count and int(records["key"].max()) >= len(header.triples):
        raise DatasetError("a record names a triple the header does not list")
    return DatasetIndex(header, records, actual)
