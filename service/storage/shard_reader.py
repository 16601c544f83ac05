"""A direct reader for the one shard layout hsstore writes (Zarr v3 `sharding_indexed`, index at the end, inner
chunks `bytes -> blosc -> crc32c`). zarr's generic read path moved ~0.25 GB/s here, a third of what blosc alone
decodes; this reader reads the index once, `pread`s only the chunks a selection needs, checks each chunk's crc32c
and decodes them on a thread pool straight into the output array. Arrays in any other layout return None and are
read through zarr. The files stay plain Zarr v3: any zarr reader opens them.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import product
from math import ceil, prod
from pathlib import Path

import google_crc32c
import numpy as np
from numcodecs import Blosc

from schemas.chunks import ChunkDigests, chunk_digest, flat_index

_EMPTY = np.uint64(2**64 - 1)
# Shared by reads and writes: blosc and crc32c release the GIL, so chunks (de)compress in parallel.
POOL = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="hsstore-codec")


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


def _crc_ok(payload: bytes | memoryview, stored: bytes) -> bool:
    # google_crc32c takes bytes or a numpy array, not a memoryview: view the buffer as uint8, without a copy
    return int(google_crc32c.value(np.frombuffer(payload, dtype=np.uint8))).to_bytes(4, "little") == stored


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


def _check_metadata(array_dir: Path, meta: dict, layout: tuple | None, written: Written) -> None:
    """The array's zarr.json must say what was written: one flipped byte there would misplace every read."""
    if layout is None:
        raise ChecksumError(f"{array_dir.name}: not the layout it was written in")
    shard, chunk, dtype = layout
    expected_chunk = written.chunks.shape if written.chunks is not None else chunk
    expected_shard = [ceil(n / c) * c for n, c in zip(written.shape, expected_chunk, strict=True)]
    if (
        tuple(meta["shape"]) != tuple(written.shape)
        or dtype != written.dtype
        or list(chunk) != list(expected_chunk)
        or list(shard) != expected_shard
    ):
        raise ChecksumError(f"{array_dir.name}: metadata differs from what was written")


def read_array(
    array_dir: Path, selection: tuple[slice | list[int], ...], written: Written | None = None
) -> np.ndarray | None:
    """`selection`: a slice (step 1) or index list per dimension. None if the layout is not ours (and nothing was
    recorded of it). With `written`, the metadata is checked against it, and each chunk read against its digest."""
    try:
        meta = json.loads((array_dir / "zarr.json").read_bytes())
        layout = _plain_layout(meta)
        if written is not None:
            _check_metadata(array_dir, meta, layout, written)
    except ChecksumError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as exc:  # damaged JSON
        raise ChecksumError(f"{array_dir.name}: metadata unreadable ({type(exc).__name__})") from None
    if layout is None:
        return None
    shard, chunk, dtype = layout
    shape = meta["shape"]
    checked = written is not None and written.chunks is not None and written.check_digests
    digests = written.chunks.digests if checked else None  # type: ignore[union-attr]
    wanted = [range(*s.indices(n)) if isinstance(s, slice) else list(s) for s, n in zip(selection, shape, strict=True)]
    out = np.empty([len(w) for w in wanted], dtype=dtype)
    if out.size == 0:
        return out
    shard_path = array_dir.joinpath("c", *["0"] * len(shape))
    grid = [ceil(s / c) for s, c in zip(shard, chunk, strict=True)]
    blosc = Blosc()
    fd = os.open(shard_path, os.O_RDONLY)
    try:
        index_bytes = 16 * prod(grid) + 4
        raw_index = os.pread(fd, index_bytes, os.fstat(fd).st_size - index_bytes)
        if not _crc_ok(memoryview(raw_index)[:-4], raw_index[-4:]):
            raise ChecksumError(f"{shard_path}: shard index checksum mismatch")
        index = np.frombuffer(raw_index[:-4], dtype="<u8").reshape(*grid, 2)

        # For each dimension: which chunks are touched, and for each the (source, destination) index pairs.
        per_dim = []
        for want, size in zip(wanted, chunk, strict=True):
            touched: dict[int, tuple[list[int], list[int]]] = {}
            for position, element in enumerate(want):
                src, dst = touched.setdefault(element // size, ([], []))
                src.append(element % size)
                dst.append(position)
            per_dim.append(sorted(touched.items()))

        def decode(coords: tuple[tuple[int, tuple[list[int], list[int]]], ...]) -> None:
            offset, nbytes = index[tuple(c for c, _ in coords)]
            if offset == _EMPTY:
                block = np.zeros(chunk, dtype=dtype)  # fill value
            else:
                data = memoryview(os.pread(fd, int(nbytes), int(offset)))
                if not _crc_ok(data[:-4], bytes(data[-4:])):
                    raise ChecksumError(f"{shard_path}: chunk {tuple(c for c, _ in coords)} checksum mismatch")
                block = np.frombuffer(blosc.decode(data[:-4]), dtype=dtype).reshape(chunk)
            if digests is not None:
                at = flat_index(tuple(c for c, _ in coords), grid)
                if at >= len(digests) or chunk_digest(block) != digests[at]:
                    raise ChecksumError(f"{array_dir.name}: chunk {at} differs from what was written")
            src = tuple(_as_index(s) for _, (s, _) in coords)
            dst = tuple(_as_index(d) for _, (_, d) in coords)
            if all(isinstance(i, slice) for i in (*src, *dst)):
                out[dst] = block[src]
            else:
                out[np.ix_(*map(_as_array, dst))] = block[np.ix_(*map(_as_array, src))]

        list(POOL.map(decode, product(*per_dim)))
    finally:
        os.close(fd)
    return out


def _as_array(index: slice | list[int]) -> np.ndarray:
    return np.arange(index.start, index.stop) if isinstance(index, slice) else np.asarray(index)


def _as_index(positions: list[int]) -> slice | list[int]:
    """A run of consecutive positions as a slice (a view), anything else as a list."""
    if positions == list(range(positions[0], positions[-1] + 1)):
        return slice(positions[0], positions[-1] + 1)
    return positions
