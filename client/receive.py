"""Receiving features bodies: the chunk wire format decoded and verified while it arrives, safetensors as before.

A chunk body is received into recycled host memory (`client.host_memory`: no page faults and zero-fill per read),
as are the arrays it decodes into, and each chunk is handed to a thread pool as soon as its last byte is in: there its
crc32c is checked, blosc decodes it into a per-thread scratch block, the block is checked against the digest
recorded when it was written, and the part of it the read selected is copied into place. blosc, blake3, crc32c and
numpy's copies release the GIL, so the pool decodes on every core while the receiving thread reads the socket.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from math import prod
from typing import Literal

import numpy as np
from numcodecs import Blosc

from client.bodies import Body, fill
from client.errors import IntegrityError
from client.features import Features, decode_verified
from client.host_memory import HOST_MEMORY
from schemas import chunk_wire
from schemas.chunks import ChunkDigests, as_positions, crc_ok, entry_digest, grid, touched, unflatten
from schemas.content_hash import content_hash
from schemas.manifest import Manifest
from schemas.tensors import DTYPES, RawTensor
from schemas.wire import WireFormatError

Verify = Literal["chunks", "full"]
_POOL: ThreadPoolExecutor | None = None
_scratch = threading.local()
_BLOSC = Blosc()
_BLOSC_HEADER = struct.Struct("<III")


def _decoders() -> ThreadPoolExecutor:
    """The decode pool, made on first use in each process (a DataLoader worker forked from a process that had one
    inherits its object but none of its threads): a thread per core this process may run on (its affinity, which
    a container's or a job scheduler's CPU set narrows; not the machine's count)."""
    global _POOL
    if _POOL is None:
        cores = len(os.sched_getaffinity(0))
        _POOL = ThreadPoolExecutor(max_workers=max(2, cores), thread_name_prefix="hsstore-decode")
    return _POOL


def _forget_pool() -> None:
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


class _Array:
    """One array being assembled: its output, and per dimension where each touched chunk's positions go."""

    def __init__(self, sent: chunk_wire.SentArray, digests: ChunkDigests) -> None:
        self.sent = sent
        self.digests = digests
        self.dtype = np.dtype(DTYPES[sent.dtype][1])
        self.grid = grid(sent.shape, sent.chunk)
        self.nbytes = prod(sent.chunk) * self.dtype.itemsize
        shape = sent.served_shape()
        self.out = HOST_MEMORY.take(prod(shape) * self.dtype.itemsize).view(self.dtype).reshape(shape)
        self.places = [{c: (src, dst) for c, src, dst in dim} for dim in touched(sent.wanted(), sent.chunk)]

    def decode(self, at: int, frame: memoryview) -> None:
        if not crc_ok(frame):
            raise IntegrityError(f"{self.sent.name}: chunk {at} fails its crc32c")
        payload = frame[:-4]
        # blosc's own header: version, lz version, flags, typesize, then u32 nbytes, blocksize, cbytes
        nbytes, _, cbytes = _BLOSC_HEADER.unpack_from(payload, 4) if payload.nbytes >= 16 else (-1, -1, -1)
        if nbytes != self.nbytes or cbytes != payload.nbytes:
            raise IntegrityError(f"{self.sent.name}: chunk {at} is not a blosc frame of one chunk")
        block = _scratch_block(self.nbytes)
        _BLOSC.decode(payload, out=block)
        typed = block.view(self.dtype).reshape(self.sent.chunk)
        if not self.digests.matches(at, typed):
            raise IntegrityError(f"{self.sent.name}: chunk {at} differs from what was written")
        coords = unflatten(at, self.grid)
        src = tuple(self.places[d][c][0] for d, c in enumerate(coords))
        dst = tuple(self.places[d][c][1] for d, c in enumerate(coords))
        if all(isinstance(i, slice) for i in (*src, *dst)):
            self.out[dst] = typed[src]
        else:
            self.out[np.ix_(*map(as_positions, dst))] = typed[np.ix_(*map(as_positions, src))]


class ChunkDecoder:
    """Decodes one chunk body while it arrives in `buffer`: call `feed(filled)` as bytes land, then `finish`."""

    def __init__(self, buffer: memoryview, verify: Verify = "chunks") -> None:
        self.buffer = buffer
        self.verify = verify
        self.header: chunk_wire.ChunkHeader | None = None
        self.manifest: Manifest | None = None
        self._start = 0
        self._queue: list[tuple[_Array, int, int, int]] = []  # (array, position in grid, offset, length)
        self._next = 0
        self._arrays: list[_Array] = []
        self._futures: list[Future[None]] = []

    def feed(self, filled: int) -> None:
        try:
            if self.header is None and not self._read_header(filled):
                return
        except WireFormatError as exc:
            raise IntegrityError(f"malformed chunk body: {exc}") from None
        while self._next < len(self._queue):
            array, at, offset, length = self._queue[self._next]
            start = self._start + offset
            if start + length > filled:
                return
            self._futures.append(_decoders().submit(array.decode, at, self.buffer[start : start + length]))
            self._next += 1

    @classmethod
    def of_data(
        cls, header: chunk_wire.ChunkHeader, manifest: Manifest, data: memoryview, verify: Verify = "chunks"
    ) -> ChunkDecoder:
        """A decoder for a body's data alone (a direct read's chunks, fetched from the store into `data`), whose
        header came separately and was checked against its manifest."""
        decoder = cls(data, verify)
        decoder._begin(header, manifest, 0)
        return decoder

    def _read_header(self, filled: int) -> bool:
        size = chunk_wire.header_length(self.buffer[:filled])
        if size is None or filled < size:
            return False
        self._begin(*chunk_wire.decode_header(self.buffer[:size]))
        return True

    def _begin(self, header: chunk_wire.ChunkHeader, manifest: Manifest, start: int) -> None:
        self.header, self.manifest, self._start = header, manifest, start
        for sent in header.arrays:
            array = _Array(sent, manifest.tensors[sent.name].chunks)  # type: ignore[arg-type]
            self._arrays.append(array)
            self._queue += [(array, at, offset, length) for at, offset, length, _ in sent.chunks]

    def wait(self) -> None:
        """Until every decode started is over (the buffer may then be reused), whatever their outcome."""
        for future in self._futures:
            future.exception()

    def finish(self, filled: int) -> Features:
        self.feed(filled)
        if self.header is None or self.manifest is None:
            raise IntegrityError("a chunk body ended inside its header")
        if self._next < len(self._queue) or filled != self._start + self.header.data_bytes:
            raise IntegrityError(f"a chunk body of {filled} bytes does not end where its index does")
        for future in self._futures:
            future.result()
        tensors = {a.sent.name: RawTensor.from_numpy(a.sent.name, a.sent.dtype, a.out) for a in self._arrays}
        features = Features(self.manifest, tensors, list(self.header.layers), tuple(self.header.tokens))
        if self.header.full != features.full:
            raise IntegrityError("the chunk header's `full` does not match the part it serves")
        if self.verify == "full" and features.full and content_hash(tensors.values()) != self.manifest.content_hash:
            raise IntegrityError(f"received tensors do not hash to {self.manifest.content_hash}")
        return features


def decode_chunks(body: bytes | bytearray | memoryview, verify: Verify = "chunks") -> Features:
    """A whole chunk body already received."""
    view = memoryview(body).cast("B")
    return ChunkDecoder(view, verify).finish(view.nbytes)


def receive_chunks(body: Body, length: int, verify: Verify = "chunks") -> Features:
    """Receive a chunk body of `length` bytes from `body`, decoding it as it arrives. The body lands in recycled
    memory (not bytearray(length): it zero-fills under the GIL, 25% of a 12-thread read's GIL-held time on the GPU
    host), which no decode still running can lose: each holds a view of it."""
    view = memoryview(HOST_MEMORY.take(length))
    decoder = ChunkDecoder(view, verify)
    try:
        return decoder.finish(fill(view, body, decoder.feed))
    finally:
        decoder.wait()


class CheckedCopy:
    """A tensor of a decoded full entry not yet checked against its write-time chunk digests, which can only be
    read by copying it out: `start_copy` checks each chunk as it lands in the destination (the block is read once,
    into a per-thread scratch, hashed there and copied on from it), so a batch is assembled in one pass over the
    source instead of a check and then a copy. The destination holds verified bytes once every future says True."""

    def __init__(self, tensor: RawTensor, chunks: ChunkDigests, on_mismatch: Callable[[], None] | None = None) -> None:
        self.name, self.dtype, self.shape = tensor.name, tensor.dtype, tensor.shape
        self._array = tensor.numpy()
        self._chunks = chunks
        self._on_mismatch = on_mismatch  # the cache drops a damaged file

    def start_copy(self, out: np.ndarray) -> list[Future[bool]]:
        """Copy into `out` (same shape, the same bytes' numpy dtype) on the decode pool, a future per chunk."""
        if out.shape != self._array.shape or out.dtype != self._array.dtype:
            raise ValueError(f"{self.name}: cannot copy {self._array.shape} {self._array.dtype} into {out.shape}")
        chunk_grid = grid(self._array.shape, self._chunks.shape)
        return [
            _decoders().submit(_block_matches, self._array, self._chunks, unflatten(at, chunk_grid), at, out)
            for at in range(len(self._chunks.digests))
        ]

    def finish(self, copying: list[Future[bool]]) -> None:
        """Wait for `start_copy`'s chunks; IntegrityError if any differed from what was written (the destination
        then holds bytes that must not be used)."""
        if not all([check.result() for check in copying]):
            if self._on_mismatch is not None:
                self._on_mismatch()
            raise IntegrityError(f"{self.name}: a chunk differs from what was written")


def verify_decoded(features: Features, defer: frozenset[str] = frozenset()) -> bool:
    """Check a full entry's decoded tensors against the chunk digests recorded when it was written, chunk by chunk
    on the decode pool (each block copied into a per-thread scratch, edge blocks zero-padded, and hashed): what lets
    a decoded copy be trusted at the speed of the cores, where its sha256 content hash runs on one. False when the
    entry has no chunk digests (older entries: check the content hash instead). The tensors named in `defer` get
    every check but their chunks' (their `CheckedCopy` checks those as it copies them out)."""
    manifest = features.manifest
    digests = {name: info.chunks for name, info in manifest.tensors.items()}
    if not features.full or manifest.chunks_digest is None or any(d is None for d in digests.values()):
        return False
    if entry_digest(digests) != manifest.chunks_digest:
        raise IntegrityError("the manifest's chunk digests do not match their record")
    if set(features.tensors) != set(digests):
        raise IntegrityError(f"tensors {sorted(features.tensors)} are not the manifest's {sorted(digests)}")
    checks = []
    for name, tensor in features.tensors.items():
        chunks = digests[name]
        assert chunks is not None
        if list(tensor.shape) != manifest.tensors[name].shape:
            raise IntegrityError(
                f"{name}: shape {list(tensor.shape)}, the manifest says {manifest.tensors[name].shape}"
            )
        if name in defer:
            continue
        array = tensor.numpy()
        chunk_grid = grid(array.shape, chunks.shape)
        for at in range(len(chunks.digests)):
            checks.append(_decoders().submit(_block_matches, array, chunks, unflatten(at, chunk_grid), at))
    results = [check.result() for check in checks]
    if not all(results):
        raise IntegrityError("a chunk differs from what was written")
    return True


def _block_matches(
    array: np.ndarray, chunks: ChunkDigests, coords: tuple[int, ...], at: int, out: np.ndarray | None = None
) -> bool:
    """Whether the chunk at `at` of `array` is as written; with `out`, it is copied there from the checked scratch
    (only when it matches)."""
    region = tuple(slice(c * size, (c + 1) * size) for c, size in zip(coords, chunks.shape, strict=True))
    part = array[region]
    block = _scratch_block(prod(chunks.shape) * array.dtype.itemsize).view(array.dtype).reshape(chunks.shape)
    if part.shape != block.shape:  # an edge chunk: stored zero-padded
        block[...] = 0
    inside = tuple(slice(0, n) for n in part.shape)
    block[inside] = part
    if not chunks.matches(at, block):
        return False
    if out is not None:
        out[region] = block[inside]
    return True


def decode_any(body: bytes | bytearray | memoryview, chunks: bool, verify: Verify = "chunks") -> Features:
    """A features body in either wire format, verified."""
    if chunks:
        return decode_chunks(body, verify)
    return decode_verified(body)


def _scratch_block(nbytes: int) -> np.ndarray:
    block = getattr(_scratch, "block", None)
    if block is None or block.nbytes < nbytes:
        block = _scratch.block = np.empty(nbytes, dtype=np.uint8)
    return block[:nbytes]
