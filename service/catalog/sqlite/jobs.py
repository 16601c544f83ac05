"""Warm jobs in SQLite: a `jobs` row and one `job_items` row per (sample, backend)."""

from __future__ import annotations

import json

from schemas.keys import prefix_bounds
from schemas.states import CompletionSource, ItemState, JobState
from service.catalog.job_records import JobItem, JobRecord, LeaseRecord, NewItem, item_from_row, job_from_row
from service.catalog.sqlite.database import SqliteDatabase

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id          TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    priority    INTEGER NOT NULL,
    run_now     INTEGER NOT NULL,
    backends    TEXT NOT NULL,
    featureset  TEXT NOT NULL,
    completion  TEXT,
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    tokens      INTEGER NOT NULL DEFAULT 0,
    busy_s      REAL NOT NULL DEFAULT 0,
    error       TEXT
);
CREATE TABLE IF NOT EXISTS job_items (
    job_id            TEXT NOT NULL,
    idx               INTEGER NOT NULL,
    backend           TEXT NOT NULL,
    sample            TEXT NOT NULL,
    prompt_hash       TEXT NOT NULL,
    state             TEXT NOT NULL,
    error             TEXT,
    content_hash      TEXT,
    greedy_tokens     INTEGER,
    completion_ids    TEXT,
    completion_source TEXT,
    PRIMARY KEY (job_id, idx, backend)
);
CREATE INDEX IF NOT EXISTS job_items_pending ON job_items (job_id, state);
"""


_LEASES = "ALTER TABLE job_items ADD COLUMN lease_owner TEXT; ALTER TABLE job_items ADD COLUMN lease_until REAL"
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # the database's clock, in epoch seconds
# items a job found already stored: a warm run of stored samples says "0 new", not "10 stored"
_EXISTING = "ALTER TABLE jobs ADD COLUMN existing INTEGER NOT NULL DEFAULT 0"
MIGRATIONS = [_SCHEMA, _LEASES, _EXISTING]


class SqliteJobStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        db.migrate("jobs", MIGRATIONS)

    _JOB_COLUMNS = (
        "id, state, priority, run_now, backends, featureset, completion, created_at, started_at, "
        "finished_at, tokens, busy_s, error, existing"
    )
    _ITEM_COLUMNS = "job_id, idx, backend, sample, prompt_hash, state, completion_ids, completion_source"

    def create_job(self, job: JobRecord, items: list[NewItem]) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                f"INSERT INTO jobs ({self._JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.id,
                    job.state,
                    job.priority,
                    int(job.run_now),
                    json.dumps(job.backends),
                    json.dumps(job.featureset),
                    job.completion,
                    job.created_at,
                    None,
                    None,
                    0,
                    0.0,
                    None,
                    0,
                ),
            )
            conn.executemany(
                "INSERT INTO job_items (job_id, idx, backend, sample, prompt_hash, state, greedy_tokens)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        job.id,
                        i.index,
                        i.backend,
                        json.dumps(i.sample),
                        i.prompt_hash,
                        ItemState.PENDING,
                        i.greedy_tokens,
                    )
                    for i in items
                ],
            )

    def get_job(self, job_id: str) -> JobRecord | None:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return job_from_row(row) if row else None

    def job_ids_starting(self, prefix: str, limit: int = 2) -> list[str]:
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (*prefix_bounds(prefix), limit)
            ).fetchall()
        return [row[0] for row in rows]

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs ORDER BY created_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return [job_from_row(r) for r in rows]

    def job_counts(self, job_id: str) -> dict[str, int]:
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT state, COUNT(*) FROM job_items WHERE job_id = ? GROUP BY state", (job_id,)
            ).fetchall()
            fetched = conn.execute(
                "SELECT COUNT(*) FROM job_items WHERE job_id = ? AND completion_ids IS NOT NULL", (job_id,)
            ).fetchone()[0]
        return {**{state: count for state, count in rows}, "completions_fetched": fetched}

    def job_errors(self, job_id: str, limit: int = 100) -> list[tuple[int, str, str, str]]:
        with self.db.connection() as conn:
            return conn.execute(
                "SELECT idx, backend, prompt_hash, error FROM job_items"
                f" WHERE job_id = ? AND state = '{ItemState.FAILED}' ORDER BY idx LIMIT ?",
                (job_id, limit),
            ).fetchall()

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
                "UPDATE jobs SET state = ?, started_at = COALESCE(started_at, ?), finished_at = ?, error = ?"
                " WHERE id = ?",
                (state, started_at, finished_at, error, job_id),
            )

    def add_job_work(self, job_id: str, tokens: int, busy_s: float, existing: int = 0) -> None:
        with self.db.writing() as conn:
            conn.execute(
                "UPDATE jobs SET tokens = tokens + ?, busy_s = busy_s + ?, existing = existing + ? WHERE id = ?",
                (tokens, busy_s, existing, job_id),
            )

    def runnable_jobs(self, include_windowed: bool) -> list[JobRecord]:
        """Jobs with work left, highest priority first, then oldest; run-now jobs only unless the window is open."""
        where = f"state IN ('{JobState.QUEUED}', '{JobState.RUNNING}')" + (
            "" if include_windowed else " AND run_now = 1"
        )
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY priority DESC, created_at"
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
                f"SELECT {self._ITEM_COLUMNS} FROM job_items WHERE job_id = ? AND state = '{ItemState.PENDING}'{extra} "
                "ORDER BY backend, idx LIMIT ?",
                (job_id, limit),
            ).fetchall()
        return [item_from_row(r) for r in rows]

    def claim_items(
        self, job_id: str, worker: str, limit: int, lease_s: float, backend: str | None = None
    ) -> list[JobItem]:
        with self.db.transaction() as conn:  # BEGIN: SQLite's one writer at a time makes the claim atomic
            rows = conn.execute(
                f"SELECT {self._ITEM_COLUMNS} FROM job_items WHERE job_id = ? AND state = '{ItemState.PENDING}'"
                f" AND (lease_until IS NULL OR lease_until < {_NOW}) AND (? IS NULL OR backend = ?)"
                " ORDER BY backend, idx LIMIT ?",
                (job_id, backend, backend, limit),
            ).fetchall()
            conn.executemany(
                f"UPDATE job_items SET lease_owner = ?, lease_until = {_NOW} + ? WHERE job_id = ? AND idx = ?"
                " AND backend = ?",
                [(worker, lease_s, job_id, row[1], row[2]) for row in rows],
            )
        return [item_from_row(r) for r in rows]

    def renew_leases(self, worker: str, lease_s: float) -> int:
        with self.db.writing() as conn:
            return conn.execute(
                f"UPDATE job_items SET lease_until = {_NOW} + ? WHERE lease_owner = ? AND state = ?",
                (lease_s, worker, ItemState.PENDING),
            ).rowcount

    def release_leases(self, worker: str) -> None:
        with self.db.writing() as conn:
            conn.execute(
                "UPDATE job_items SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? AND state = ?",
                (worker, ItemState.PENDING),
            )

    def live_leases(self) -> list[LeaseRecord]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT lease_owner, job_id, COUNT(*), MAX(lease_until) - {_NOW} FROM job_items"
                f" WHERE lease_owner IS NOT NULL AND state = ? AND lease_until >= {_NOW}"
                " GROUP BY lease_owner, job_id ORDER BY lease_owner, job_id",
                (ItemState.PENDING,),
            ).fetchall()
        return [LeaseRecord(worker, job, int(items), float(left)) for worker, job, items, left in rows]

    def finish_item(
        self,
        item: JobItem,
        state: ItemState,
        content_hash: str | None = None,
        error: str | None = None,
        worker: str | None = None,
    ) -> bool:
        holder = "" if worker is None else f" AND lease_owner = ? AND lease_until >= {_NOW}"
        with self.db.writing() as conn:
            return (
                conn.execute(
                    "UPDATE job_items SET state = ?, content_hash = ?, error = ?, lease_owner = NULL,"
                    f" lease_until = NULL WHERE job_id = ? AND idx = ? AND backend = ?{holder}",
                    (state, content_hash, error, item.job_id, item.index, item.backend)
                    + ((worker,) if worker is not None else ()),
                ).rowcount
                == 1
            )

    def set_completion(self, job_id: str, index: int, completion_ids: list[int], source: str) -> None:
        """A reference completion for sample `index` of a job, shared by all its backends."""
        with self.db.writing() as conn:
            conn.execute(
                "UPDATE job_items SET completion_ids = ?, completion_source = ? WHERE job_id = ? AND idx = ?",
                (json.dumps(completion_ids), source, job_id, index),
            )

    def fall_back_to_target(self, job_id: str, index: int) -> None:
        with self.db.writing() as conn:
            conn.execute(
                "UPDATE job_items SET completion_source = ? WHERE job_id = ? AND idx = ? AND completion_ids IS NULL",
                (CompletionSource.GREEDY_TARGET, job_id, index),
            )
