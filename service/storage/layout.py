"""What both blob stores share about the one layout they write: chunk shapes, how a Selection indexes an array, the
record an array is checked against, and byte runs of adjacent chunks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from schemas.manifest import TensorInfo
from schemas.tensors import DTYPES
from service.storage.protocol import Selection
from service.storage.shard_reader import Written


def chunk_shape(shape: tuple[int, ...], chunk_tokens: int) -> tuple[int, ...]:
    """Inner chunks: `chunk_tokens` rows x one position along axis 1 (so a slice of axis 1, such as some of the
    layers of hidden states, reads only its chunks)."""
    tokens = max(1, min(chunk_tokens, shape[0]))
    if len(shape) == 3:
        return (tokens, 1, shape[2])
    return (tokens, *shape[1:])


def read_index(selection: Selection, name: str, ndim: int) -> tuple[slice | list[int], ...]:
    """The selection as an index of one array: rows along axis 0, the named positions along axis 1."""
    index: list[slice | list[int]] = [slice(*selection.rows) if selection.rows else slice(None)]
    if name in selection.axis1:
        index.append(list(selection.axis1[name]))
    return tuple(index + [slice(None)] * (ndim - len(index)))


def written_as(tensor: TensorInfo, check_digests: bool) -> Written:
    return Written(tuple(tensor.shape), np.dtype(DTYPES[tensor.dtype][1]), tensor.chunks, check_digests)


def runs(chunks: Sequence[tuple[int, int, int]]) -> Iterator[tuple[int, int]]:
    """(start, stop) byte runs of located chunks, adjacent ones merged."""
    run: list[int] | None = None
    for _, offset, length in chunks:
        if run is not None and run[1] == offset:
            run[1] += length
            continue
        if run is not None:
            yield run[0], run[1]
        run = [offset, offset + length]
    if run is not None:
        yield run[0], run[1]
