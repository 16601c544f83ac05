"""What both blob stores share about the one layout they write: chunk shapes, how a Selection indexes an array, the
record an array is checked against, reading and locating a selection array by array, and byte runs of adjacent
chunks. A store brings only where its arrays lie (a `ShardSource` per array name)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from schemas.manifest import TensorInfo
from schemas.tensors import DTYPES, RawTensor
from service.storage.protocol import LocatedArray, Selection
from service.storage.shard_reader import ShardSource, Written, locate_array, read_array

SourceOf = Callable[[str], ShardSource]


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


def read_arrays(
    source_of: SourceOf,
    info: Mapping[str, Mapping],
    selection: Selection,
    written: Mapping[str, TensorInfo] | None,
    check_digests: bool,
    other_layout: Callable[[str, tuple], np.ndarray] | None = None,
) -> dict[str, RawTensor]:
    """Every array of `info` ({name: {dtype, shape}}) read at `selection`; with `written`, each checked against it.
    An array not in our layout is read by `other_layout` (name, index), else refused (ValueError)."""
    out: dict[str, RawTensor] = {}
    for name in sorted(info):
        index = read_index(selection, name, len(info[name]["shape"]))
        record = written_as(written[name], check_digests) if written is not None else None
        data = read_array(source_of(name), index, record)
        if data is None:
            if other_layout is None:
                raise ValueError(f"{name}: not the layout this store writes")
            data = other_layout(name, index)
        out[name] = RawTensor.from_numpy(name, info[name]["dtype"], np.asarray(data))
    return out


def locate_arrays(
    source_of: SourceOf, selection: Selection, written: Mapping[str, TensorInfo]
) -> dict[str, LocatedArray] | None:
    """Where each array's chunks for `selection` lie; None if any array is not in our layout."""
    located = {}
    for name, tensor in sorted(written.items()):
        index = read_index(selection, name, len(tensor.shape))
        found = locate_array(source_of(name), index, written_as(tensor, False))
        if found is None:
            return None
        located[name] = LocatedArray(found.layout.blosc, found.chunks)
    return located


class ShardedReads(ABC):
    """The read side of a store that writes this layout, written once for every engine: an engine says whether an
    entry is there (`exists`), where one of its arrays lies (`_source`), what its group document lists
    (`_tensors`), and how it reads an array of another layout (`_other_layout`; by default it refuses one)."""

    @abstractmethod
    def exists(self, content_hash: str) -> bool: ...

    @abstractmethod
    def _source(self, content_hash: str, name: str) -> ShardSource: ...

    @abstractmethod
    def _tensors(self, content_hash: str) -> dict[str, dict]:
        """The entry's arrays as its group document lists them: {name: {dtype, shape}}."""

    def _other_layout(self, content_hash: str) -> Callable[[str, tuple], np.ndarray] | None:
        return None

    def get(self, content_hash: str) -> dict[str, RawTensor]:
        return self.get_slice(content_hash, Selection())

    def get_slice(
        self,
        content_hash: str,
        selection: Selection,
        written: Mapping[str, TensorInfo] | None = None,
        check_digests: bool = True,
    ) -> dict[str, RawTensor]:
        if not self.exists(content_hash):
            raise KeyError(content_hash)
        # what the manifest recorded, not what the (changeable) group document says now, where there is one
        info = (
            {name: {"dtype": t.dtype, "shape": t.shape} for name, t in written.items()}
            if written is not None
            else self._tensors(content_hash)
        )
        return read_arrays(
            lambda name: self._source(content_hash, name),
            info,
            selection,
            written,
            check_digests,
            self._other_layout(content_hash),
        )

    def locate(
        self, content_hash: str, selection: Selection, written: Mapping[str, TensorInfo]
    ) -> dict[str, LocatedArray] | None:
        if not self.exists(content_hash):
            raise KeyError(content_hash)
        return locate_arrays(lambda name: self._source(content_hash, name), selection, written)


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
