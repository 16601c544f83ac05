"""A direct writer for hsstore's one Zarr v3 layout (the twin of shard_reader): every inner chunk compressed with
blosc (the store's codec, `schemas.codecs`) on a thread pool, crc32c appended, all chunks in one shard with its index
at the end, metadata as zarr itself writes it (`encode_array`; `write_array` puts it in a directory). zarr's generic
write path cost most of the GPU host's writer time in Python (and the GIL the extraction thread needs); this one is
blosc, crc32c and one write. Any zarr reader opens the result (tested against zarr-python)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import product
from math import ceil, prod
from pathlib import Path
from typing import Any

import numpy as np
from numcodecs import Blosc

from schemas import chunks
from schemas.chunks import DIGEST, ChunkDigests
from schemas.codecs import BLOSC, DEFAULT_CODEC, StoreCodec
from service.storage.shard_reader import shard_key

_SHUFFLE = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
# Writes' chunk codecs run on a small pool (the `write_codec_threads` setting), not on the readers' thread per core
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()  # writer threads ask for a pool at once: one is made


def codec_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of `threads` for writes' chunk codecs: one per size, shared by every store of that size."""
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"hsstore-write-{threads}")
        return _POOLS[threads]


def blosc_for(codec: StoreCodec) -> Blosc:
    """numcodecs' compressor for `codec`: what writes every stored chunk of a blob written with it."""
    params = BLOSC[codec]
    return Blosc(cname=params.cname, clevel=params.clevel, shuffle=_SHUFFLE[params.shuffle], blocksize=0)


def write_group(path: Path, attributes: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(json.dumps({"attributes": attributes, "zarr_format": 3, "node_type": "group"}))


def array_metadata(
    shape: tuple[int, ...],
    dtype: np.dtype,
    chunk: tuple[int, ...],
    shard: tuple[int, ...],
    attributes: dict[str, Any],
    codec: StoreCodec = DEFAULT_CODEC,
) -> dict[str, Any]:
    bytes_codec: dict[str, Any] = {"name": "bytes"}
    if dtype.itemsize > 1:
        bytes_codec["configuration"] = {"endian": "little"}
    params = BLOSC[codec]
    blosc = {
        "typesize": dtype.itemsize,
        "cname": params.cname,
        "clevel": params.clevel,
        "shuffle": params.shuffle,
        "blocksize": 0,
    }
    return {
        "shape": list(shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(chunk),
                    "codecs": [bytes_codec, {"name": "blosc", "configuration": blosc}, {"name": "crc32c"}],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                    "index_location": "end",
                },
            }
        ],
        "attributes": attributes,
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


@dataclass(frozen=True, slots=True)
class EncodedArray:
    """One array in our layout, ready to be put anywhere: its metadata document and its shard, in pieces."""

    metadata: bytes
    shard: list[
        bytes
    ]  # the chunks as stored (blosc frames) and crcs, then the index and its crc: written one after the other
    shard_key: str  # the shard's path under the array
    digests: ChunkDigests


def encode_array(
    data: np.ndarray,
    chunk: tuple[int, ...],
    attributes: dict[str, Any],
    codec: StoreCodec = DEFAULT_CODEC,
    *,
    threads: int,
) -> EncodedArray:
    """`data` (little-endian) as one shard of `chunk`-shaped inner chunks (edge chunks padded with the fill value),
    with each chunk's digest, taken from the block it compressed; the chunks on `threads` codec threads."""
    shard = tuple(ceil(n / c) * c for n, c in zip(data.shape, chunk, strict=True))
    chunk_grid = [s // c for s, c in zip(shard, chunk, strict=True)]
    meta = array_metadata(data.shape, data.dtype, chunk, shard, attributes, codec)
    compressor = blosc_for(codec)

    def encode(coords: tuple[int, ...]) -> tuple[bytes, bytes, str]:
        contiguous = np.ascontiguousarray(chunks.block(data, coords, chunk))
        compressed = compressor.encode(contiguous)
        # kept apart and written one after the other: joining them is a copy made holding the GIL
        return compressed, chunks.crc32c(compressed), chunks.chunk_digest(contiguous)

    coordinates = list(product(*(range(g) for g in chunk_grid)))  # C order, the order of the shard index
    encoded = list(codec_pool(threads).map(encode, coordinates))
    index = np.empty((prod(chunk_grid), 2), dtype="<u8")
    offset = 0
    for position, (compressed, crc, _) in enumerate(encoded):
        index[position] = (offset, len(compressed) + len(crc))
        offset += len(compressed) + len(crc)
    index_bytes = index.tobytes()
    pieces = [piece for compressed, crc, _ in encoded for piece in (compressed, crc)]
    return EncodedArray(
        metadata=json.dumps(meta).encode(),
        shard=[*pieces, index_bytes + chunks.crc32c(index_bytes)],
        shard_key=shard_key(data.ndim),
        digests=ChunkDigests(shape=list(chunk), digest=DIGEST, digests=[digest for _, _, digest in encoded]),
    )


def write_array(
    path: Path,
    data: np.ndarray,
    chunk: tuple[int, ...],
    attributes: dict[str, Any],
    codec: StoreCodec = DEFAULT_CODEC,
    *,
    threads: int,
) -> ChunkDigests:
    """`encode_array` into a directory."""
    encoded = encode_array(data, chunk, attributes, codec, threads=threads)
    shard_file = path / encoded.shard_key
    shard_file.parent.mkdir(parents=True, exist_ok=True)
    with shard_file.open("wb") as handle:
        for piece in encoded.shard:
            handle.write(piece)
    (path / "zarr.json").write_bytes(encoded.metadata)
    return encoded.digests
