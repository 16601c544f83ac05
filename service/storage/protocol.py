"""The storage protocol every blob backend implements (and `tests/service/storage` checks, unchanged, for each)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from schemas.tensors import RawTensor


@dataclass(frozen=True, slots=True)
class Selection:
    """Which part of a blob to read: a range along axis 0 of every array, and, for the arrays named in `axis1`,
    positions along their axis 1 in the order given (what those axes mean is the caller's business)."""

    rows: tuple[int, int] | None = None
    axis1: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def is_everything(self) -> bool:
        return self.rows is None and not self.axis1


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
