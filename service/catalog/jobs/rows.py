"""Warm jobs in SQL, one statement text for both engines: a `jobs` row and one `job_items` row per (sample,
backend). An engine says its placeholder and clock (`Dialect`), how it runs one statement over many rows, and how it
claims items (the one statement the engines cannot share)."""

from __future__ import annotations

import itertools
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from schemas.keys import prefix_bounds
from schemas.states import CompletionSource, ItemState, JobState
from service.catalog.jobs.records import JobItem, JobRecord, LeaseRecord, NewItem, item_from_row, job_from_row
from service.catalog.schema.dialect import Dialect

JOB_COLUMNS = (
    "id, state, priority, run_now, backends, featureset, completion, created_at, started_at, finished_at, tokens, "
    "busy_s, error, existing"
)
ITEM_COLUMNS = "job_id, idx, backend, sample, prompt_hash, state, completion_ids, completion_source"
# a new item's row (_item_row), in order
NEW_ITEM_COLUMNS = ("job_id", "idx", "backend", "sample", "prompt_hash", "state", "greedy_tokens")
# a job of this many items makes a planner's statistics of job_items stale (Postgres: a claim seq-scans 10^6
# rows until autovacuum's ANALYZE comes round, 11 claims/s against 700 after it)
_RESTATED_AFTER = 10_000
_BATCH = 5_000  # items inserted a statement at a time


def _item_row(item: NewItem) -> tuple:
    return item.index, item.backend, json.dumps(item.sample), item.prompt_hash, ItemState.PENDING, item.greedy_tokens


# Leases, read through the index of leased items (schema/tables.py's JOB_LEASE_INDEX): per worker and job, the pending
# items whose lease is live, or has run out with nobody taking them over yet; and a worker's heartbeat
_LEASES = (
    "SELECT lease_owner, job_id, COUNT(*), MAX(lease_until) - {{now}} FROM job_items"
    " WHERE lease_owner IS NOT NULL AND state = ? AND lease_until {} {{now}}"
    " GROUP BY lease_owner, job_id ORDER BY lease_owner, job_id"
)
LIVE_LEASES, LAPSED_LEASES = _LEASES.format(">="), _LEASES.format("<")
RENEW_LEASES = "UPDATE job_items SET lease_until = {now} + ? WHERE lease_owner = ? AND state = ?"


class SqlJobStore(Dialect, ABC):
    """`now` is the database's clock: every host's workers agree on it."""

    def __init__(self, db: Any) -> None:
        self.db = db

    @abstractmethod
    def _many(self, conn: Any, statement: str, rows: Sequence[tuple]) -> None:
        """One statement over many rows."""

    def _insert_items(self, conn: Any, rows: Sequence[tuple]) -> None:
        """New items' rows (NEW_ITEM_COLUMNS), inserted in the caller's transaction."""
        columns, values = ", ".join(NEW_ITEM_COLUMNS), ", ".join("?" * len(NEW_ITEM_COLUMNS))
        self._many(conn, self._sql(f"INSERT INTO job_items ({columns}) VALUES ({values})"), rows)

    @abstractmethod
    def _claim(self, conn: Any, job_id: str, worker: str, limit: int, lease_s: float, backend: str | None) -> list:
        """Lease up to `limit` pending items of a job no live lease holds (of `backend`, if given); their rows."""

    @abstractmethod
    def _claiming(self) -> Any:
        """The connection a claim runs in (a transaction where the claim takes two statements)."""

    def create_job(self, job: JobRecord, items: Iterable[NewItem]) -> None:
        """The job and its items in one transaction, the items inserted a batch at a time as they come (a job of
        10^6 samples is never a list in memory)."""
        with self.db.transaction() as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO jobs (id, state, priority, run_now, backends, featureset, completion, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    job.id,
                    job.state,
                    job.priority,
                    job.run_now,
                    json.dumps(job.backends),
                    json.dumps(job.featureset),
                    job.completion,
                    job.created_at,
                ),
            )
            total, pending = 0, iter(items)
            while batch := list(itertools.islice(pending, _BATCH)):  # (itertools.batched: Python 3.12 on)
                self._insert_items(conn, [(job.id, *_item_row(item)) for item in batch])
                total += len(batch)
            conn.execute(self._sql("UPDATE jobs SET items_total = ? WHERE id = ?"), (total, job.id))
        if total >= _RESTATED_AFTER:
            self._restate_items()

    def _restate_items(self) -> None:
        """After a job large enough to change the table's shape: what the engine's planner needs told (nothing,
        unless an engine says)."""
        return None

    def get_job(self, job_id: str) -> JobRecord | None:
        with self.db.connection() as conn:
            row = conn.execute(self._sql(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"), (job_id,)).fetchone()
        return job_from_row(row) if row else None

    def job_ids_starting(self, prefix: str, limit: int = 2) -> list[str]:
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql("SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?"),
                (*prefix_bounds(prefix), limit),
            ).fetchall()
        return [row[0] for row in rows]

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY created_at DESC LIMIT ?"), (limit,)
            ).fetchall()
        return [job_from_row(r) for r in rows]

    def job_states(self) -> dict[JobState, int]:
        with self.db.connection() as conn:
            rows = conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        found = {JobState(state): int(n) for state, n in rows}
        return {state: found.get(state, 0) for state in JobState}

    def job_counts(self, job_id: str) -> dict[str, int]:
        """Kept current as items are finished: one row read, however many items the job has."""
        with self.db.connection() as conn:
            row = conn.execute(
                self._sql("SELECT items_total, items_done, items_failed, completions_fetched FROM jobs WHERE id = ?"),
                (job_id,),
            ).fetchone()
        if row is None:
            return {"completions_fetched": 0}
        total, done, failed, fetched = (int(n) for n in row)
        return {
            ItemState.PENDING: total - done - failed,
            ItemState.DONE: done,
            ItemState.FAILED: failed,
            "completions_fetched": fetched,
        }

    def job_errors(self, job_id: str, limit: int = 100) -> list[tuple[int, str, str, str]]:
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(
                    "SELECT idx, backend, prompt_hash, error FROM job_items WHERE job_id = ? AND state = ?"
                    " ORDER BY idx LIMIT ?"
                ),
                (job_id, ItemState.FAILED, limit),
            ).fetchall()
        return [tuple(row) for row in rows]

    def set_job_state(
        self,
        job_id: str,
        state: JobState,
        started_at: str | None = None,
        finished_at: str | None = None,
        error: str | None = None,
    ) -> None:
        with self.db.writing() as conn:
            conn.execute(
                self._sql(
                    "UPDATE jobs SET state = ?, started_at = COALESCE(started_at, ?), finished_at = ?, error = ?"
                    " WHERE id = ?"
                ),
                (state, started_at, finished_at, error, job_id),
            )

    def add_job_work(self, job_id: str, tokens: int, busy_s: float, existing: int = 0) -> None:
        with self.db.writing() as conn:
            conn.execute(
                self._sql(
                    "UPDATE jobs SET tokens = tokens + ?, busy_s = busy_s + ?, existing = existing + ? WHERE id = ?"
                ),
                (tokens, busy_s, existing, job_id),
            )

    def runnable_jobs(self, include_windowed: bool) -> list[JobRecord]:
        """Jobs with work left, highest priority first, then oldest; run-now jobs only unless the window is open."""
        where, args = "state IN (?, ?)", list[object]([JobState.QUEUED, JobState.RUNNING])
        if not include_windowed:
            where, args = where + " AND run_now = ?", [*args, True]
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(f"SELECT {JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY priority DESC, created_at"), args
            ).fetchall()
        return [job_from_row(r) for r in rows]

    def pending_items(self, job_id: str, limit: int, needing_completion: bool = False) -> list[JobItem]:
        extra = (
            " AND completion_ids IS NULL AND completion_source IS NULL AND greedy_tokens IS NOT NULL"
            if needing_completion
            else ""
        )
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT {ITEM_COLUMNS} FROM job_items WHERE job_id = ? AND state = ?{extra}"
                    " ORDER BY backend, idx LIMIT ?"
                ),
                (job_id, ItemState.PENDING, limit),
            ).fetchall()
        return [item_from_row(r) for r in rows]

    def claim_items(
        self, job_id: str, worker: str, limit: int, lease_s: float, backend: str | None = None
    ) -> list[JobItem]:
        with self._claiming() as conn:
            rows = self._claim(conn, job_id, worker, limit, lease_s, backend)
        return sorted((item_from_row(r) for r in rows), key=lambda i: (i.backend, i.index))

    def renew_leases(self, worker: str, lease_s: float) -> int:
        with self.db.writing() as conn:
            return conn.execute(self._sql(RENEW_LEASES), (lease_s, worker, ItemState.PENDING)).rowcount

    def release_leases(self, worker: str) -> None:
        with self.db.writing() as conn:
            conn.execute(
                self._sql(
                    "UPDATE job_items SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? AND state = ?"
                ),
                (worker, ItemState.PENDING),
            )

    def live_leases(self) -> list[LeaseRecord]:
        return self._leases(LIVE_LEASES)

    def lapsed_leases(self) -> list[LeaseRecord]:
        return self._leases(LAPSED_LEASES)

    def _leases(self, statement: str) -> list[LeaseRecord]:
        with self.db.connection() as conn:
            rows = conn.execute(self._sql(statement), (ItemState.PENDING,)).fetchall()
        return [LeaseRecord(worker, job, int(items), float(left)) for worker, job, items, left in rows]

    def finish_item(
        self,
        item: JobItem,
        state: ItemState,
        content_hash: str | None = None,
        error: str | None = None,
        worker: str | None = None,
    ) -> bool:
        holder = "" if worker is None else " AND lease_owner = ? AND lease_until >= {now}"
        counted = {ItemState.DONE: "items_done", ItemState.FAILED: "items_failed"}.get(state)
        with self.db.transaction() as conn:
            cursor = conn.execute(
                self._sql(
                    "UPDATE job_items SET state = ?, content_hash = ?, error = ?, lease_owner = NULL,"
                    f" lease_until = NULL WHERE job_id = ? AND idx = ? AND backend = ? AND state = ?{holder}"
                ),
                (state, content_hash, error, item.job_id, item.index, item.backend, ItemState.PENDING)
                + ((worker,) if worker is not None else ()),
            )
            finished = cursor.rowcount == 1
            if finished and counted is not None:
                conn.execute(self._sql(f"UPDATE jobs SET {counted} = {counted} + 1 WHERE id = ?"), (item.job_id,))
            return bool(finished)

    def set_completion(self, job_id: str, index: int, completion_ids: list[int], source: str) -> None:
        """A reference completion for sample `index` of a job, shared by all its backends."""
        with self.db.transaction() as conn:
            fetched = conn.execute(
                self._sql(
                    "UPDATE job_items SET completion_ids = ?, completion_source = ? WHERE job_id = ? AND idx = ?"
                    " AND completion_ids IS NULL"
                ),
                (json.dumps(completion_ids), source, job_id, index),
            ).rowcount
            conn.execute(
                self._sql("UPDATE jobs SET completions_fetched = completions_fetched + ? WHERE id = ?"),
                (fetched, job_id),
            )

    def fall_back_to_target(self, job_id: str, index: int) -> None:
        with self.db.writing() as conn:
            conn.execute(
                self._sql(
                    "UPDATE job_items SET completion_source = ? WHERE job_id = ? AND idx = ? AND completion_ids IS NULL"
                ),
                (CompletionSource.GREEDY_TARGET, job_id, index),
            )
