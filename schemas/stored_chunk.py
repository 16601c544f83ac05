"""A stored chunk as it lies in a shard and travels on the chunk wire: a blosc frame (Zarr's `blosc` codec) followed
by its crc32c (Zarr's `crc32c` codec). One function checks and unpacks it, for the client and the service alike.

Stored chunks are decoded by C-Blosc2 (`blosc2`), which reads the C-Blosc1 frames Zarr and numcodecs write: on the GPU
host's CPU it decoded the default codec's frames (lz4 + bit-shuffle) at 3.3 GB/s on one thread against numcodecs'
1.8, and 29.5 against 19.6 on twelve (`benchmarks/frame_decode.py`). The frames written stay numcodecs' own, so
any Zarr reader opens the store."""

from __future__ import annotations

import struct
from functools import cache
from types import ModuleType

import numpy as np

from schemas.chunks import crc_ok

_SIZES = struct.Struct("<III")  # blosc's header from byte 4: nbytes, blocksize, cbytes
_HEADER_BYTES = 16
_MEMCPYED = 0x02  # blosc's flag for a frame that holds its chunk as it is


class StoredChunkError(ValueError):
    """A stored chunk that fails its crc32c, is not a blosc frame of the chunk expected, or does not decode."""


@cache
def _blosc2() -> ModuleType:
    # imported on first use: it takes ~0.5 s, which no command that decodes nothing should pay
    import blosc2

    blosc2.set_releasegil(True)  # decodes run on thread pools; blosc2 holds the interpreter lock unless told
    return blosc2  # type: ignore[no-any-return]  # blosc2 ships no type information: the module is Any


def chunk_bytes(raw: memoryview, nbytes: int, out: np.ndarray | None = None) -> np.ndarray:
    """The `nbytes` bytes of the chunk `raw` holds as stored (blosc frame + crc32c), as uint8: a view of `raw` itself
    where blosc stored the chunk as it is (codec "uncompressed": checked where it lies, never copied), else decoded
    into `out` (uint8, at least `nbytes`; a new array if None). StoredChunkError names what is wrong."""
    raw = memoryview(raw).cast("B")
    if not crc_ok(raw):
        raise StoredChunkError("fails its crc32c")
    payload = raw[:-4]
    declared, _, stored = _SIZES.unpack_from(payload, 4) if payload.nbytes >= _HEADER_BYTES else (-1, -1, -1)
    if declared != nbytes or stored != payload.nbytes:
        raise StoredChunkError(f"is not a blosc frame of one {nbytes}-byte chunk")
    if payload[2] & _MEMCPYED and stored == nbytes + _HEADER_BYTES:
        return np.frombuffer(payload[_HEADER_BYTES:], dtype=np.uint8)
    out = np.empty(nbytes, dtype=np.uint8) if out is None else out[:nbytes]
    try:
        _blosc2().decompress2(payload, dst=out, nthreads=1)  # a context of its own: no global lock
    except (RuntimeError, ValueError) as exc:
        raise StoredChunkError(f"does not decode ({exc})") from None
    return out
