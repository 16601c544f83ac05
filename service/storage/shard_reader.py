"""A direct reader for the one shard layout hsstore writes (Zarr v3 `sharding_indexed`, index at the end, inner
chunks `bytes -> blosc -> crc32c`). zarr's generic read path moved ~0.25 GB/s here, a third of what blosc alone
decodes; this reader reads the index once, fetches only the chunks a selection needs (concurrent `pread`s on a disk,
ranged GETs from an object store: `ShardSource`), checks each chunk's crc32c and decodes them on a thread pool
straight into the output array (a read under `INLINE_BYTES` on the calling thread). Arrays in any other layout
return None and are read through zarr. The files stay plain Zarr v3: any zarr reader opens them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import product
from math import ceil, prod
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from schemas.chunks import ChunkDigests, as_positions, crc_ok, flat_index, touched
from schemas.stored_chunk import StoredChunkError, chunk_bytes

_EMPTY = np.uint64(2**64 - 1)
T = TypeVar("T")
# Shared by reads and writes: blosc and crc32c release the GIL, so chunks (de)compress in parallel.
POOL = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="hsstore-codec")


# Work under this many bytes runs on the calling thread: handing it to pool threads and waiting for them costs more
# than preading or decoding it here (a small entry's arrays, a few tokens' rows)
INLINE_BYTES = 1 << 20


def _each(work: Callable[..., T], nbytes: int, *items: Sequence[Any]) -> list[T]:
    """`work` called with each item of `items` (zipped): on the pool when there are several and their `nbytes`
    reach `INLINE_BYTES`, else here."""
    if len(items[0]) == 1 or nbytes < INLINE_BYTES:
        return [work(*found) for found in zip(*items, strict=True)]
    return list(POOL.map(work, *items))


class ChecksumError(ValueError):
    """A chunk or shard index no longer matches its crc32c, or an array's metadata or a decoded chunk no longer
    matches what was recorded when it was written: the bytes on disk changed."""


@dataclass(frozen=True, slots=True)
class Written:
    """What an array was written as, from its manifest: checked before any of its bytes are served."""

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: ChunkDigests | None  # None: entries written before digests were recorded
    check_digests: bool = True  # False: the chunk shape is checked, the chunks' digests are not


def _plain_layout(meta: dict) -> tuple[list[int], list[int], np.dtype] | None:
    """(shard shape, inner chunk shape, dtype) if the array is one we wrote, else None."""
    (codec,) = meta.get("codecs", [None])
    if not codec or codec.get("name") != "sharding_indexed":
        return None
    config = codec["configuration"]
    names = [c["name"] for c in config["codecs"]]
    index_names = [c["name"] for c in config["index_codecs"]]
    if (
        names != ["bytes", "blosc", "crc32c"]
        or index_names != ["bytes", "crc32c"]
        or config.get("index_location", "end") != "end"
    ):
        return None
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    if any(s < n for s, n in zip(shard, meta["shape"], strict=True)):
        return None  # more than one shard: not a layout we write
    return shard, config["chunk_shape"], np.dtype(meta["data_type"]).newbyteorder("<")


def _check_metadata(name: str, meta: dict, layout: tuple | None, written: Written) -> None:
    """The array's zarr.json must say what was written: one flipped byte there would misplace every read."""
    if layout is None:
        raise ChecksumError(f"{name}: not the layout it was written in")
    shard, chunk, dtype = layout
    expected_chunk = written.chunks.shape if written.chunks is not None else chunk
    expected_shard = [ceil(n / c) * c for n, c in zip(written.shape, expected_chunk, strict=True)]
    if (
        tuple(meta["shape"]) != tuple(written.shape)
        or dtype != written.dtype
        or list(chunk) != list(expected_chunk)
        or list(shard) != expected_shard
    ):
        raise ChecksumError(f"{name}: metadata differs from what was written")


@dataclass(frozen=True, slots=True)
class Layout:
    """One array in the layout we write, as its metadata (checked against what was written) describes it."""

    label: str  # where it lies, for messages (the server's log only)
    shape: tuple[int, ...]
    shard: tuple[int, ...]
    chunk: tuple[int, ...]
    dtype: np.dtype
    blosc: dict  # the blosc codec's configuration

    @property
    def grid(self) -> list[int]:
        return [ceil(s / c) for s, c in zip(self.shard, self.chunk, strict=True)]


@dataclass(frozen=True, slots=True)
class ShardChunks:
    """Where the chunks a selection touches lie in one array's shard: (C-order position, offset, stored length with
    the crc32c trailer), in the order of the shard index."""

    layout: Layout
    chunks: list[tuple[int, int, int]]


class ShardSource(Protocol):
    """One array of a blob where it lies (a directory, an object store prefix): its metadata document and its one
    shard. Nothing here checks anything: the reader does."""

    label: str

    def metadata(self) -> bytes: ...

    def tail(self, length: int) -> tuple[bytes | memoryview, int]:
        """The shard's last `length` bytes (its index), and the shard's size."""

    def read_many(self, spans: Sequence[tuple[int, int]]) -> Sequence[bytes | memoryview]:
        """The shard's bytes at each (offset, length), fetched concurrently where that helps."""


class LocalArray:
    """An array directory on a disk: `zarr.json` and the shard under `c/`."""

    def __init__(self, array_dir: Path) -> None:
        self.array_dir = array_dir
        self.label = str(array_dir)
        self._metadata: bytes | None = None  # read once per read: the layout, the index and the chunks all need it

    def metadata(self) -> bytes:
        if self._metadata is None:
            self._metadata = (self.array_dir / "zarr.json").read_bytes()
        return self._metadata

    def shard(self) -> Path:
        ndim = len(json.loads(self.metadata())["shape"])
        return shard_file(self.array_dir, ndim)

    def tail(self, length: int) -> tuple[bytes, int]:
        fd = os.open(self.shard(), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            return os.pread(fd, length, max(0, size - length)), size
        finally:
            os.close(fd)

    def read_many(self, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        fd = os.open(self.shard(), os.O_RDONLY)
        try:
            return _each(lambda span: os.pread(fd, span[1], span[0]), sum(n for _, n in spans), spans)
        finally:
            os.close(fd)


def shard_file(array_dir: Path, ndim: int) -> Path:
    """The one shard of an array in our layout (its key under Zarr's default chunk key encoding)."""
    return array_dir.joinpath(shard_key(ndim))


def shard_key(ndim: int) -> str:
    return "/".join(["c", *["0"] * ndim])


def _layout(source: ShardSource, written: Written | None) -> Layout | None:
    name = source.label.rsplit("/", 1)[-1]
    try:
        meta = json.loads(source.metadata())
        layout = _plain_layout(meta)
        if written is not None:
            _check_metadata(name, meta, layout, written)
    except ChecksumError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as exc:  # damaged JSON
        raise ChecksumError(f"{name}: metadata unreadable ({type(exc).__name__})") from None
    if layout is None:
        return None
    shard, chunk, dtype = layout
    blosc = meta["codecs"][0]["configuration"]["codecs"][1].get("configuration", {})
    return Layout(source.label, tuple(meta["shape"]), tuple(shard), tuple(chunk), dtype, blosc)


def _index(source: ShardSource, layout: Layout) -> tuple[np.ndarray, int]:
    """The shard index, [*grid, 2] of (offset, nbytes), checked against its crc32c; and the shard's size."""
    index_bytes = 16 * prod(layout.grid) + 4
    raw_index, size = source.tail(index_bytes)
    raw = memoryview(raw_index)
    if raw.nbytes != index_bytes or not crc_ok(raw):
        raise ChecksumError(f"{layout.label}: shard index checksum mismatch")
    return np.frombuffer(raw[:-4], dtype="<u8").reshape(*layout.grid, 2), size


def _wanted(selection: tuple[slice | list[int], ...], shape: tuple[int, ...]) -> list[range | list[int]]:
    return [range(*s.indices(n)) if isinstance(s, slice) else list(s) for s, n in zip(selection, shape, strict=True)]


def locate_array(source: ShardSource, selection: tuple[slice | list[int], ...], written: Written) -> ShardChunks | None:
    """Where the chunks `selection` needs lie, without reading them (None if the layout is not ours). The metadata
    and the shard index are checked; the chunks are the reader's to check."""
    layout = _layout(source, written)
    if layout is None:
        return None
    wanted = _wanted(selection, layout.shape)
    if any(len(w) == 0 for w in wanted):
        return ShardChunks(layout, [])
    per_dim = [[c for c, _, _ in dim] for dim in touched(wanted, layout.chunk)]
    index, size = _index(source, layout)
    found = []
    for coords in product(*per_dim):
        offset, nbytes = (int(v) for v in index[coords])
        if offset == int(_EMPTY) or offset + nbytes > size or nbytes < 4:
            raise ChecksumError(f"{layout.label}: chunk {coords} is missing or out of bounds")
        found.append((flat_index(coords, layout.grid), offset, nbytes))
    return ShardChunks(layout, sorted(found))


def read_array(
    source: ShardSource, selection: tuple[slice | list[int], ...], written: Written | None = None
) -> np.ndarray | None:
    """`selection`: a slice (step 1) or index list per dimension. None if the layout is not ours (and nothing was
    recorded of it). With `written`, the metadata is checked against it, and each chunk read against its digest."""
    layout = _layout(source, written)
    if layout is None:
        return None
    chunk, dtype, grid = layout.chunk, layout.dtype, layout.grid
    digests = written.chunks if written is not None and written.check_digests else None
    wanted = _wanted(selection, layout.shape)
    out = np.empty([len(w) for w in wanted], dtype=dtype)
    if out.size == 0:
        return out
    index, size = _index(source, layout)
    block_bytes = prod(chunk) * dtype.itemsize
    jobs = list(product(*touched(wanted, chunk)))
    spans = []
    for job in jobs:
        offset, nbytes = (int(v) for v in index[tuple(c for c, _, _ in job)])
        if offset != int(_EMPTY) and (offset + nbytes > size or nbytes < 4):
            raise ChecksumError(f"{layout.label}: chunk {tuple(c for c, _, _ in job)} lies outside the shard")
        spans.append((offset, nbytes))
    stored = source.read_many([span for span in spans if span[0] != int(_EMPTY)])
    fetched = iter(stored)
    in_order = [next(fetched) if offset != int(_EMPTY) else None for offset, _ in spans]

    def decode(job: tuple[tuple[int, slice | list[int], slice | list[int]], ...], raw: bytes | None) -> None:
        coords = tuple(c for c, _, _ in job)
        if raw is None:
            block = np.zeros(chunk, dtype=dtype)  # fill value
        else:
            try:
                block = chunk_bytes(memoryview(raw), block_bytes).view(dtype).reshape(chunk)
            except StoredChunkError as exc:
                raise ChecksumError(f"{layout.label}: chunk {coords} {exc}") from None
        if digests is not None:
            at = flat_index(coords, grid)
            if not digests.matches(at, block):
                raise ChecksumError(f"{layout.label.rsplit('/', 1)[-1]}: chunk {at} differs from what was written")
        src = tuple(s for _, s, _ in job)
        dst = tuple(d for _, _, d in job)
        if all(isinstance(i, slice) for i in (*src, *dst)):
            out[dst] = block[src]
        else:
            out[np.ix_(*map(as_positions, dst))] = block[np.ix_(*map(as_positions, src))]

    _each(decode, len(jobs) * block_bytes, jobs, in_order)
    return out
