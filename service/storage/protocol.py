"""The storage protocol every blob backend implements (and `tests/service/storage` checks, unchanged, for each)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from schemas.tensors import RawTensor


@dataclass(frozen=True, slots=True)
class Selection:
    """Which part of a blob to read: layer positions along axis 1 of `hidden_states`, and a token range."""

    layer_positions: tuple[int, ...] | None = None
    tokens: tuple[int, int] | None = None

    @property
    def is_everything(self) -> bool:
        return self.layer_positions is None and self.tokens is None


class BlobStore(Protocol):
    """Write-once tensor groups named by their content hash, plus the manifest documents that point at them."""

    def put_if_absent(self, content_hash: str, tensors: Sequence[RawTensor]) -> bool:
        """Publish atomically; True if written now, False if that content was already there."""

    def get(self, content_hash: str) -> dict[str, RawTensor]:
        """Every tensor of a blob; KeyError if absent."""

    def get_slice(self, content_hash: str, selection: Selection) -> dict[str, RawTensor]:
        """Only the chunks the selection needs are read."""

    def exists(self, content_hash: str) -> bool: ...

    def delete(self, content_hash: str) -> bool: ...

    def iter(self) -> Iterator[str]:
        """Content hashes of every published blob."""

    def put_manifest(self, name: str, document: bytes) -> None:
        """Write a manifest document atomically (idempotent for one name)."""

    def iter_manifests(self) -> Iterator[bytes]: ...

    def ping(self) -> None:
        """Raise if the store cannot be reached."""
