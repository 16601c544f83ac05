"""What a read serves: the part of an entry it selects, its tensors, and its body as a wire format sends it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from schemas import chunk_body, safetensors_body
from schemas.featureset import LayerId
from schemas.http import FormatSpec
from schemas.manifest import Manifest
from schemas.tensors import RawTensor
from service.storage.protocol import Selection


@dataclass(frozen=True, slots=True)
class Part:
    """Which part of an entry a read serves: its layers (in the order asked) and its token range."""

    layers: list[LayerId]
    tokens: tuple[int, int]
    selection: Selection
    full: bool  # the whole entry: its content hash covers what is served


@dataclass(frozen=True, slots=True)
class Served:
    """Tensors as served, with what part of the entry they are."""

    manifest: Manifest
    tensors: dict[str, RawTensor]
    part: Part
    served_hash: str

    def metadata(self) -> dict[str, str]:
        part = self.part
        return safetensors_body.served_metadata(
            self.manifest.model_dump_json(), part.layers, part.tokens, self.served_hash, part.full
        )


@dataclass(frozen=True, slots=True)
class Body:
    """A part of an entry as one body format sends it. Its format (media type, frame kind in a batch) and length
    are known before any blob is read; `open()` reads it and gives the pieces, with the headers only the reading
    can tell (the served hash of a safetensors part)."""

    format: FormatSpec
    length: int
    part: Part
    _open: Callable[[], tuple[dict[str, str], Iterable[bytes | memoryview]]]

    def open(self) -> tuple[dict[str, str], Iterable[bytes | memoryview]]:
        return self._open()


@dataclass(frozen=True, slots=True)
class ChunkBody:
    """A part of an entry as the chunk wire format sends it: the header, then each array's stored chunks."""

    part: Part
    header: chunk_body.ChunkHeader
    encoded: bytes  # the header as sent
    arrays: list[tuple[str, list[tuple[int, int, int]]]]  # per array, its chunks as the store located them
    length: int
