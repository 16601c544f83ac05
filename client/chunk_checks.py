"""Decoded tensors checked against the chunk digests recorded when they were written: in place (`verify_decoded`),
or as they are copied out into a batch (a `DeferredCopy`, which `pad_collate` fills its batch from)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from math import prod

import numpy as np

from client.decode_pool import decoders, scratch_block
from client.errors import IntegrityError
from client.features import Features
from schemas.chunks import ChunkDigests, entry_digest, grid, unflatten
from schemas.tensors import RawTensor


class DeferredCopy(ABC):
    """A tensor that can only be read by copying it out, each chunk checked against its write-time digest as it
    lands: `start_copy(out)` starts it on the decode pool, `finish` waits and raises IntegrityError if any chunk
    differed (`out` then holds bytes that must not be used)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @abstractmethod
    def start_copy(self, out: np.ndarray) -> list[Future]: ...

    @abstractmethod
    def finish(self, copying: list[Future]) -> None: ...

    def _fits(self, out: np.ndarray, dtype: np.dtype) -> None:
        if out.shape != tuple(self.shape) or out.dtype != dtype:
            raise ValueError(f"{self.name}: cannot copy {tuple(self.shape)} {dtype} into {out.shape} {out.dtype}")


class CheckedCopy(DeferredCopy):
    """A tensor of a decoded full entry not yet checked against its write-time chunk digests, which can only be
    read by copying it out: `start_copy` checks each chunk as it lands in the destination (the block is read once,
    into a per-thread scratch, hashed there and copied on from it), so a batch is assembled in one pass over the
    source instead of a check and then a copy. The destination holds verified bytes once every future says True."""

    def __init__(self, tensor: RawTensor, chunks: ChunkDigests, on_mismatch: Callable[[], None] | None = None) -> None:
        self.name, self.dtype, self.shape = tensor.name, tensor.dtype, tuple(tensor.shape)
        self._array = tensor.numpy()
        self._chunks = chunks
        self._on_mismatch = on_mismatch  # the cache drops a damaged file

    def start_copy(self, out: np.ndarray) -> list[Future[bool]]:
        """Copy into `out` (same shape, the same bytes' numpy dtype) on the decode pool, a future per chunk."""
        self._fits(out, self._array.dtype)
        chunk_grid = grid(self._array.shape, self._chunks.shape)
        return [
            decoders().submit(_block_matches, self._array, self._chunks, unflatten(at, chunk_grid), at, out)
            for at in range(len(self._chunks.digests))
        ]

    def finish(self, copying: list[Future[bool]]) -> None:
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
            checks.append(decoders().submit(_block_matches, array, chunks, unflatten(at, chunk_grid), at))
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
    block = scratch_block(prod(chunks.shape) * array.dtype.itemsize).view(array.dtype).reshape(chunks.shape)
    if part.shape != block.shape:  # an edge chunk: stored zero-padded
        block[...] = 0
    inside = tuple(slice(0, n) for n in part.shape)
    block[inside] = part
    if not chunks.matches(at, block):
        return False
    if out is not None:
        out[region] = block[inside]
    return True
