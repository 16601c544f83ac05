"""What a catalog does; SQLite today, Postgres for several hosts, both checked by one test suite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from schemas.keys import EntryKey
from schemas.manifest import AuditRecord, Manifest


@dataclass(frozen=True, slots=True)
class EntryFilter:
    prompt_hash: str | None = None
    model_revision: str | None = None
    backend: str | None = None
    featureset_id: str | None = None
    content_hash: str | None = None
    since: str | None = None  # ISO-8601 timestamp: versions created at or after it


class Catalog(Protocol):
    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        """Record a version; returns the stored manifest (with `seq`) and whether it was new."""

    def versions(self, key: EntryKey) -> list[Manifest]:
        """Every version of one entry, newest first."""

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        """Versions matching `where` in insertion order, from just after `after_seq`."""

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        """Attach the outcome of re-extracting one version; it shows in that version's manifest."""

    def count(self) -> int: ...

    def ping(self) -> None:
        """Raise if the catalog cannot be reached."""

    def close(self) -> None: ...
