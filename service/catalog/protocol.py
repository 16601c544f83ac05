"""What a catalog does, as three narrow protocols: versions of entries, warm jobs, and a small key/value table.
SQLite and Postgres implement each; `service/catalog/testing.py` and `jobs_testing.py` hold the suites each passes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from schemas.checks_api import StoreTally
from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from schemas.states import ItemState, JobState
from service.catalog.jobs.records import JobItem, JobRecord, LeaseRecord, NewItem
from service.catalog.versions.records import StoredKey


class VersionCatalog(Protocol):
    """Entry keys -> versions, with the manifest of each."""

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        """Record a version; returns the stored manifest (with `seq`) and whether it was new."""

    def add_many(self, manifests: Iterable[Manifest], batch: int = 5_000) -> int:
        """What `add` does for each, a batch to a transaction, without reading them back; how many were new."""

    def versions(self, key: EntryKey) -> list[Manifest]:
        """Every version of one entry, newest first."""

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        """Versions matching `where` in insertion order, from just after `after_seq`."""

    def find_documents(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[tuple[int, str]]:
        """As `find`, each version's seq and manifest JSON, no model built (a listing page sent as it is)."""

    def find_keys(self, where: EntryFilter, limit: int = 10_000, after_seq: int = 0) -> list[StoredKey]:
        """As `find`, each version's whole key and tokens only (no manifest read): snapshots, counts."""

    def sample(
        self, where: EntryFilter, count: int, seed: int | None = None, accept: Callable[[Manifest], bool] | None = None
    ) -> list[Manifest]:
        """Up to `count` versions at random from the key spaces `where` names, at a cost that does not grow with the
        catalog; `accept` turns a drawn one down."""

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        """Attach the outcome of re-extracting one version; it shows in that version's manifest."""

    def set_integrity(self, content_hash: str, record: IntegrityRecord | None) -> None:
        """What the last check of a blob's bytes found, shown in every version stored in it (None clears it)."""

    def moved_to(self, prompt_hash: str) -> str | None:
        """The key a prompt hash of the rule before the normal form was re-keyed to (`upgrades/rekey.py`)."""

    def record_move(self, old_hash: str, prompt_hash: str) -> None:
        """Record that `old_hash` (the rule before the normal form) names `prompt_hash` now."""

    def ping(self) -> None:
        """Raise if the catalog cannot be reached."""


class StoreTallies(Protocol):
    """What the store holds, kept current as versions are added and marked (never counted by a scan): what
    `health`, the status of the store and `/metrics` read."""

    def tallies(self) -> list[StoreTally]:
        """Per key space: versions, tokens, bytes, and how many are flagged, damaged or suspect."""

    def needing_attention(self, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        """Versions flagged, damaged or suspect, oldest first (read through an index of those alone)."""

    def count(self) -> int: ...


class VersionStore(VersionCatalog, StoreTallies, Protocol):
    """What a catalog engine implements for versions: both parts, each held by the contract suite
    (`service.catalog.testing.VersionCatalogTests`)."""


class Jobs(Protocol):
    """Warm jobs and their items (one per sample and backend), so a restart resumes where the last process stopped."""

    def create_job(self, job: JobRecord, items: Iterable[NewItem]) -> None:
        """The job and all its items, in one transaction (the items read once, as they come)."""

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def job_ids_starting(self, prefix: str, limit: int = 2) -> list[str]:
        """Ids of jobs that start with `prefix` (at most `limit`)."""

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        """Newest first."""

    def job_counts(self, job_id: str) -> dict[str, int]:
        """Items per state, plus `completions_fetched`."""

    def job_states(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state, 0 where none is)."""

    def job_errors(self, job_id: str, limit: int = 100) -> list[tuple[int, str, str, str]]:
        """(index, backend, prompt_hash, error) of failed items."""

    def set_job_state(
        self,
        job_id: str,
        state: JobState,
        started_at: str | None = None,
        finished_at: str | None = None,
        error: str | None = None,
    ) -> None: ...

    def add_job_work(self, job_id: str, tokens: int, busy_s: float, existing: int = 0) -> None: ...

    def runnable_jobs(self, include_windowed: bool) -> list[JobRecord]:
        """Jobs with work left, highest priority first, then oldest; run-now jobs only unless a window is open."""

    def pending_items(self, job_id: str, limit: int, needing_completion: bool = False) -> list[JobItem]: ...


class Leases(Protocol):
    """Items leased to workers: claimed, kept alive by a heartbeat, taken over when a lease runs out, finished."""

    def claim_items(
        self, job_id: str, worker: str, limit: int, lease_s: float, backend: str | None = None
    ) -> list[JobItem]:
        """Up to `limit` pending items of a job (of one `backend`, if given) that no live lease holds (never
        leased, or its lease ran out: a dead worker's), now leased to `worker` for `lease_s` seconds of the
        database's clock. Concurrent claims never take one item twice (Postgres: `FOR UPDATE SKIP LOCKED`; SQLite:
        its write lock)."""

    def renew_leases(self, worker: str, lease_s: float) -> int:
        """The heartbeat: every pending item `worker` holds is leased for `lease_s` more seconds; how many."""

    def release_leases(self, worker: str) -> None:
        """A worker stopping cleanly hands back what it held, for the others to take at once."""

    def live_leases(self) -> list[LeaseRecord]:
        """Per worker and job, the pending items it holds under a lease that has not run out (`hsstore workers`)."""

    def lapsed_leases(self) -> list[LeaseRecord]:
        """Per worker and job, the pending items whose lease ran out and nobody has taken over yet (a worker lost:
        dead, stalled or cut off); `expires_in_s` negative, how long ago the latest ran out."""

    def finish_item(
        self,
        item: JobItem,
        state: ItemState,
        content_hash: str | None = None,
        error: str | None = None,
        worker: str | None = None,
    ) -> bool:
        """Record an item's outcome; with `worker`, only while that worker still holds its lease (a worker whose
        lease ran out and was taken over records nothing). Whether it was recorded."""


class Completions(Protocol):
    """The reference completions of a job's samples (SGLang's, or the target's as a fallback)."""

    def set_completion(self, job_id: str, index: int, completion_ids: list[int], source: str) -> None:
        """A reference completion for sample `index` of a job, shared by all its backends."""

    def fall_back_to_target(self, job_id: str, index: int) -> None:
        """Sample `index` gets no reference completion (SGLang refused it): the target generates one when it runs;
        `pending_items(needing_completion=True)` no longer lists it."""


class JobStore(Jobs, Leases, Completions, Protocol):
    """What a catalog engine implements for warm jobs: the three parts, each with its part of the contract suite
    (`service.catalog.jobs_testing`)."""


class KeyValue(Protocol):
    """Small shared settings every replica must see alike (the windows' manual overrides)."""

    def kv_get(self, name: str) -> str | None: ...

    def kv_set(self, name: str, value: str | None) -> None: ...


class Database(Protocol):
    """The one database an engine's parts share: what the composition root opens and closes."""

    read_only: bool

    def ping(self) -> None: ...

    def schema_version(self, part: str) -> int:
        """How many of a part's migration steps this database has had (0: none yet)."""

    def close(self) -> None: ...
