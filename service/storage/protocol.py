"""The storage protocol every blob backend implements (and `tests/service/storage` checks, unchanged, for each)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from schemas.chunks import ChunkDigests
from schemas.manifest import TensorInfo
from schemas.tensors import RawTensor


@dataclass(frozen=True, slots=True)
class Selection:
    """Which part of a blob to read: a range along axis 0 of every array, and, for the arrays named in `axis1`,
    positions along their axis 1 in the order given (what those axes mean is the caller's business)."""

    rows: tuple[int, int] | None = None
    axis1: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Stored:
    """The outcome of a write: whether the blob was written now, and its arrays' chunk digests (the same either
    way, since one content has one layout)."""

    written: bool
    chunks: dict[str, ChunkDigests]


@dataclass(frozen=True, slots=True)
class LocatedArray:
    """Where the chunks a selection needs lie in one stored array, as they are stored (compressed, crc32c after
    each): the blosc configuration they were written with, and per chunk (C-order position in the chunk grid,
    offset, length), in the order they lie."""

    codec: Mapping[str, object]
    chunks: list[tuple[int, int, int]]


class Blobs(Protocol):
    """Write-once tensor groups named by their content hash."""

    read_only: bool  # a replica's store: reads only, every write refused with ReadOnly

    def put_if_absent(self, content_hash: str, tensors: Sequence[RawTensor]) -> Stored:
        """Publish atomically (nothing visible until every byte is durable), or find that content there already."""

    def get(self, content_hash: str) -> dict[str, RawTensor]:
        """Every tensor of a blob; KeyError if absent."""

    def get_slice(
        self,
        content_hash: str,
        selection: Selection,
        written: Mapping[str, TensorInfo] | None = None,
        check_digests: bool = True,
    ) -> dict[str, RawTensor]:
        """Only the chunks the selection needs are read. With `written` (the manifest's tensors), every array's
        metadata is checked against it and, with `check_digests`, every chunk read against its recorded digest;
        ValueError for any difference."""

    def stored_bytes(self, content_hash: str) -> int:
        """What the blob takes in the store (metadata included); KeyError if absent."""

    def exists(self, content_hash: str) -> bool: ...

    def delete(self, content_hash: str) -> bool: ...

    def iter(self) -> Iterator[str]:
        """Content hashes of every published blob."""

    def ping(self) -> None:
        """Raise if the store cannot be reached."""


class StoredChunks(Protocol):
    """A blob's chunks as they are stored, for bodies sent without decoding and for reads straight from the store."""

    def locate(
        self, content_hash: str, selection: Selection, written: Mapping[str, TensorInfo]
    ) -> dict[str, LocatedArray] | None:
        """Per array, where the stored chunks `selection` needs lie, without reading them (the metadata and chunk
        index are checked against `written`; ValueError for any difference). None if the blob is not in a layout
        whose chunks can be sent as they are; KeyError if absent."""

    def read_located(
        self, content_hash: str, name: str, chunks: Sequence[tuple[int, int, int]]
    ) -> Iterator[bytes | memoryview]:
        """The stored bytes of `chunks` (as `locate` gave them) of one array, in order, in pieces of any size (a
        bytes-like object each); nothing is decoded or checked here: the reader checks every chunk."""

    def direct_url(self, content_hash: str, name: str, ndim: int, expires_s: float) -> str | None:
        """A URL a client may GET (with Range) the array's shard from for `expires_s` seconds, without credentials
        of its own; None where the store has none to give (a local disk)."""


class Documents(Protocol):
    """The documents kept beside the blobs: manifests (what a catalog is rebuilt from) and dataset indexes."""

    def put_manifest(self, name: str, document: bytes) -> None:
        """Write a manifest document atomically (idempotent for one name)."""

    def iter_manifests(self) -> Iterator[tuple[str, bytes]]:
        """Every manifest document as (the name it was put under, its bytes)."""

    def put_dataset(self, name: str, pieces: Iterable[bytes | memoryview]) -> None:
        """Keep a dataset index under `name` (its id's hex), its bytes the pieces one after another (streamed: an
        index of 10^7 entries is 700 MB), written whole or not at all; idempotent, one name one index."""

    def dataset_size(self, name: str) -> int | None:
        """The size of the index kept under `name`, or None if there is none."""

    def read_dataset(self, name: str, start: int = 0, length: int | None = None) -> bytes | None:
        """`length` bytes (None: the rest) of the index kept under `name` from `start`, or None if there is none."""


class BlobStore(Blobs, StoredChunks, Documents, Protocol):
    """What a storage engine implements: the three parts, each with its part of the contract suite
    (`service.storage.testing`); a service part is handed the narrowest it needs."""
