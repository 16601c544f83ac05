"""Receiving features bodies, one receiver per body format (RECEIVERS): the chunk wire format decoded and verified
while it arrives, safetensors checked against its hash.

A chunk body is received into recycled host memory (`client.host_memory`: no page faults and zero-fill per read),
as are the arrays it decodes into, and each chunk is handed to a thread pool as soon as its last byte is in: there its
crc32c is checked, blosc decodes it into a per-thread scratch block, the block is checked against the digest
recorded when it was written, and the part of it the read selected is copied into place. blosc, blake3, crc32c and
numpy's copies release the GIL, so the pool decodes on every core while the receiving thread reads the socket.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from math import prod

import numpy as np

from client.bodies import Body, fill, read_exactly
from client.chunk_checks import DeferredCopy
from client.decode_pool import decoders, scratch_block
from client.errors import IntegrityError
from client.features import Features, decode_verified
from client.host_memory import HOST_MEMORY
from schemas import chunk_body
from schemas.chunks import ChunkDigests, as_positions, grid, touched, unflatten
from schemas.content_hash import content_hash
from schemas.http import BodyFormat, MalformedBody
from schemas.manifest import HIDDEN_SCALES, Manifest
from schemas.states import Verify
from schemas.stored_chunk import StoredChunkError, chunk_bytes
from schemas.tensors import DTYPES, RawTensor


class _Array:
    """One array being assembled: its output, and per dimension where each touched chunk's positions go."""

    def __init__(self, sent: chunk_body.SentArray, digests: ChunkDigests, deferred: bool = False) -> None:
        self.sent = sent
        self.digests = digests
        self.dtype = np.dtype(DTYPES[sent.dtype][1])
        self.grid = grid(sent.shape, sent.chunk)
        self.nbytes = prod(sent.chunk) * self.dtype.itemsize
        self.shape = sent.served_shape()
        nbytes = prod(self.shape) * self.dtype.itemsize
        self.out = None if deferred else HOST_MEMORY.take(nbytes).view(self.dtype).reshape(self.shape)
        self.places = [{c: (src, dst) for c, src, dst in dim} for dim in touched(sent.wanted(), sent.chunk)]

    def decoded(self) -> np.ndarray:
        """The array its chunks were decoded into (never a deferred one's: that is decoded into a batch)."""
        assert self.out is not None
        return self.out

    def decode(self, at: int, stored: memoryview, out: np.ndarray | None = None) -> None:
        """Check chunk `at` and copy the part of it the read selected into `out` (else the array's own)."""
        out = self.out if out is None else out
        assert out is not None, "a deferred array decodes only into the batch it was handed"
        try:
            block = chunk_bytes(stored, self.nbytes, scratch_block(self.nbytes))
        except StoredChunkError as exc:
            raise IntegrityError(f"{self.sent.name}: chunk {at} {exc}") from None
        typed = block.view(self.dtype).reshape(self.sent.chunk)
        if not self.digests.matches(at, typed):
            raise IntegrityError(f"{self.sent.name}: chunk {at} differs from what was written")
        coords = unflatten(at, self.grid)
        src = tuple(self.places[d][c][0] for d, c in enumerate(coords))
        dst = tuple(self.places[d][c][1] for d, c in enumerate(coords))
        if all(isinstance(i, slice) for i in (*src, *dst)):
            out[dst] = typed[src]
        else:
            out[np.ix_(*map(as_positions, dst))] = typed[np.ix_(*map(as_positions, src))]


class ReceivedCopy(DeferredCopy):
    """A received tensor left as its stored chunks: `start_copy` checks and decodes each chunk straight into the
    batch, so it has no array of its own and is not copied a second time. It holds the body's buffer until dropped."""

    def __init__(self, array: _Array, chunks: list[tuple[int, memoryview]]) -> None:
        self.name, self.dtype, self.shape = array.sent.name, array.sent.dtype, array.shape
        self._array, self._chunks = array, chunks

    def start_copy(self, out: np.ndarray) -> list[Future[None]]:
        self._fits(out, self._array.dtype)
        return [decoders().submit(self._array.decode, at, stored, out) for at, stored in self._chunks]

    def finish(self, copying: list[Future[None]]) -> None:
        failures = [future.exception() for future in copying]  # every chunk ended before any is reported
        for failure in failures:
            if failure is not None:
                raise failure


class ChunkDecoder:
    """Decodes one chunk body while it arrives in `buffer`: call `feed(filled)` as bytes land, then `finish`."""

    def __init__(self, buffer: memoryview, verify: Verify = "chunks", defer: str | None = None) -> None:
        self.buffer = buffer
        self.verify = verify
        self.defer = defer  # an array left as its stored chunks for a `ReceivedCopy` (a full read's, checked by chunks)
        self._deferred: tuple[_Array, list[tuple[int, int, int]]] | None = None
        self.header: chunk_body.ChunkHeader | None = None
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
        except MalformedBody as exc:
            raise IntegrityError(f"malformed chunk body: {exc}") from None
        while self._next < len(self._queue):
            array, at, offset, length = self._queue[self._next]
            start = self._start + offset
            if start + length > filled:
                return
            self._futures.append(decoders().submit(array.decode, at, self.buffer[start : start + length]))
            self._next += 1

    @classmethod
    def of_data(
        cls, header: chunk_body.ChunkHeader, manifest: Manifest, data: memoryview, verify: Verify = "chunks"
    ) -> ChunkDecoder:
        """A decoder for a body's data alone (a direct read's chunks, fetched from the store into `data`), whose
        header came separately and was checked against its manifest."""
        decoder = cls(data, verify)
        decoder._begin(header, manifest, 0)
        return decoder

    def _read_header(self, filled: int) -> bool:
        size = chunk_body.header_length(self.buffer[:filled])
        if size is None or filled < size:
            return False
        self._begin(*chunk_body.decode_header(self.buffer[:size]))
        return True

    def _begin(self, header: chunk_body.ChunkHeader, manifest: Manifest, start: int) -> None:
        self.header, self.manifest, self._start = header, manifest, start
        # not an fp8 entry's hidden states: they are dequantised with their scales, not copied as they are
        deferrable = self.verify == "chunks" and header.full and HIDDEN_SCALES not in manifest.tensors
        for sent in header.arrays:
            deferred = deferrable and sent.name == self.defer
            digests = manifest.tensors[sent.name].chunks
            if digests is None:
                raise IntegrityError(f"{sent.name}: sent in chunks, but its manifest records none")
            array = _Array(sent, digests, deferred)
            places = [(at, offset, length) for at, offset, length, _ in sent.chunks]
            if deferred:
                self._deferred = (array, places)
                continue
            self._arrays.append(array)
            self._queue += [(array, *place) for place in places]

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
        if self._deferred is not None and any(o + n > self.header.data_bytes for _, o, n in self._deferred[1]):
            raise IntegrityError("a chunk body's index points past its data")
        for future in self._futures:
            future.result()
        tensors = {a.sent.name: RawTensor.from_numpy(a.sent.name, a.sent.dtype, a.decoded()) for a in self._arrays}
        start, stop = self.header.tokens
        features = Features(self.manifest, tensors, list(self.header.layers), (start, stop))
        if self.header.full != features.full:
            raise IntegrityError("the chunk header's `full` does not match the part it serves")
        if self.verify == "full" and features.full and content_hash(tensors.values()) != self.manifest.content_hash:
            raise IntegrityError(f"received tensors do not hash to {self.manifest.content_hash}")
        return features

    def deferred(self) -> ReceivedCopy | None:
        """After `finish`: the array left as its stored chunks, if one was."""
        if self._deferred is None:
            return None
        array, places = self._deferred
        chunks = [(at, self.buffer[self._start + offset : self._start + offset + n]) for at, offset, n in places]
        return ReceivedCopy(array, chunks)


def decode_chunks(body: bytes | bytearray | memoryview, verify: Verify = "chunks") -> Features:
    """A whole chunk body already received."""
    view = memoryview(body).cast("B")
    return ChunkDecoder(view, verify).finish(view.nbytes)


def receive_chunks(
    body: Body, length: int, verify: Verify = "chunks", defer: str | None = None
) -> tuple[Features, ReceivedCopy | None]:
    """Receive a chunk body of `length` bytes from `body`, decoding it as it arrives. The body lands in recycled
    memory (not bytearray(length): it zero-fills under the GIL, 25% of a 12-thread read's GIL-held time on the GPU
    host), which no decode still running can lose: each holds a view of it. With `defer`, that array of a full read
    is left as its stored chunks in a `ReceivedCopy` and out of the features' tensors (None where it was decoded as
    usual: a slice, an fp8 entry's hidden states, `verify="full"`)."""
    view = memoryview(HOST_MEMORY.take(length))
    decoder = ChunkDecoder(view, verify, defer)
    try:
        features = decoder.finish(fill(view, body, decoder.feed))
    finally:
        decoder.wait()
    return features, decoder.deferred()


def _safetensors(body: Body, length: int, verify: Verify, defer: str | None) -> tuple[Features, None]:
    """Safetensors: the service decoded it; its hash is checked here whatever `verify` says."""
    return decode_verified(read_exactly(body, length)), None


Receiver = Callable[[Body, int, Verify, str | None], tuple[Features, ReceivedCopy | None]]
# How each body format is read (schemas.http.BODY_FORMATS lists them)
RECEIVERS: dict[BodyFormat, Receiver] = {BodyFormat.CHUNKS: receive_chunks, BodyFormat.SAFETENSORS: _safetensors}


def receive(
    form: BodyFormat, body: Body, length: int, verify: Verify = "chunks", defer: str | None = None
) -> tuple[Features, ReceivedCopy | None]:
    """A features body of `length` bytes in format `form`, verified (`defer`: as `receive_chunks` takes it)."""
    try:
        return RECEIVERS[form](body, length, verify, defer)
    except MemoryError:  # a length or a shape no host holds: what a damaged frame prefix or manifest declares
        raise IntegrityError(f"a {length}-byte features body declares more than this host can hold") from None
