"""What a catalog does; SQLite today, Postgres for several hosts, both checked by one test suite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from schemas.keys import EntryKey
from schemas.manifest import AuditRecord, Manifest
from service.catalog.jobs import JobItem, JobRecord


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """Versions to find; `prompt_hash` and `content_hash` match as prefixes (a whole hash is its own prefix)."""

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

    # Window overrides and jobs live in the catalog too, so every replica sees the same ones.
    def kv_get(self, name: str) -> str | None: ...

    def kv_set(self, name: str, value: str | None) -> None: ...

    def create_job(self, job: JobRecord, items: list[tuple[int, str, dict, str, int | None]]) -> None: ...

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def job_ids_starting(self, prefix: str, limit: int = 2) -> list[str]:
        """Ids of jobs that start with `prefix` (at most `limit`)."""

    def list_jobs(self, limit: int = 100) -> list[JobRecord]: ...

    def job_counts(self, job_id: str) -> dict[str, int]: ...

    def job_errors(self, job_id: str, limit: int = 100) -> list[tuple[int, str, str, str]]: ...

    def set_job_state(
        self,
        job_id: str,
        state: str,
        started_at: str | None = None,
        finished_at: str | None = None,
        error: str | None = None,
    ) -> None: ...

    def add_job_work(self, job_id: str, tokens: int, busy_s: float) -> None: ...

    def runnable_jobs(self, include_windowed: bool) -> list[JobRecord]: ...

    def pending_items(self, job_id: str, limit: int, needing_completion: bool = False) -> list[JobItem]: ...

    def finish_item(
        self, item: JobItem, state: str, content_hash: str | None = None, error: str | None = None
    ) -> None: ...

    def set_completion(self, job_id: str, index: int, completion_ids: list[int], source: str) -> None: ...

    def count(self) -> int: ...

    def ping(self) -> None:
        """Raise if the catalog cannot be reached."""

    def close(self) -> None: ...
