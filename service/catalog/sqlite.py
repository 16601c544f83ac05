"""The SQLite catalog: one row per (entry key, content hash), the manifest kept as JSON beside the key columns."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from schemas.keys import EntryKey, prefix_bounds
from schemas.manifest import AuditRecord, Manifest
from service.catalog.jobs import JOBS_SCHEMA, JobItem, JobRecord, item_from_row, job_from_row
from service.catalog.protocol import EntryFilter

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    prompt_hash    TEXT NOT NULL,
    model_revision TEXT NOT NULL,
    backend        TEXT NOT NULL,
    featureset_id  TEXT NOT NULL,
    content_hash   TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    manifest       TEXT NOT NULL,
    audit          TEXT,
    UNIQUE (prompt_hash, model_revision, backend, featureset_id, content_hash)
);
CREATE INDEX IF NOT EXISTS versions_prompt ON versions (prompt_hash);
CREATE INDEX IF NOT EXISTS versions_created ON versions (created_at);
"""
_COLUMNS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")
_PREFIXED = ("prompt_hash", "content_hash")


class SqliteCatalog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the server's worker threads, serialised by a lock; WAL lets readers in other
        # processes (the CLI, a second replica) read while we write.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._db.executescript(JOBS_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(versions)")}
            if "audit" not in columns:  # catalogs written before audits existed
                self._db.execute("ALTER TABLE versions ADD COLUMN audit TEXT")

    def _row_to_manifest(self, seq: int, document: str, audit: str | None) -> Manifest:
        update: dict[str, object] = {"seq": seq}
        if audit is not None:
            update["audit"] = AuditRecord.model_validate_json(audit)
        return Manifest.model_validate_json(document).model_copy(update=update)

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        document = manifest.model_copy(update={"seq": None, "audit": None}).model_dump_json()
        values = (*(getattr(manifest, c) for c in _COLUMNS), manifest.created_at, document)
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash,"
                " created_at, manifest) VALUES (?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            added = cursor.rowcount == 1
            row = self._db.execute(
                "SELECT seq, manifest, audit FROM versions WHERE " + " AND ".join(f"{c} = ?" for c in _COLUMNS),
                values[: len(_COLUMNS)],
            ).fetchone()
        return self._row_to_manifest(*row), added

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, manifest, audit FROM versions WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                " AND featureset_id = ? ORDER BY seq DESC",
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [self._row_to_manifest(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clauses, params = ["seq > ?"], [after_seq]
        for column in _COLUMNS:
            if (value := getattr(where, column)) is None:
                continue
            if column in _PREFIXED:  # a range keeps the index usable, as LIKE would not
                clauses.append(f"{column} >= ? AND {column} < ?")
                params.extend(prefix_bounds(value))
            else:
                clauses.append(f"{column} = ?")
                params.append(value)
        if where.since is not None:
            clauses.append("created_at >= ?")
            params.append(where.since)
        with self._lock:
            rows = self._db.execute(
                f"SELECT seq, manifest, audit FROM versions WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [self._row_to_manifest(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE versions SET audit = ? WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                " AND featureset_id = ? AND content_hash = ?",
                (
                    record.model_dump_json(),
                    key.prompt_hash,
                    key.model_revision,
                    key.backend,
                    key.featureset_id,
                    content_hash,
                ),
            )

    # -- key/value (window overrides) -----------------------------------------------------------------------------
    def kv_get(self, name: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def kv_set(self, name: str, value: str | None) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO kv (name, value) VALUES (?, ?)", (name, value))

    # -- jobs ----------------------------------------------------------------------------------------------------
    _JOB_COLUMNS = (
        "id, state, priority, run_now, backends, featureset, completion, created_at, started_at, "
        "finished_at, tokens, busy_s, error"
    )
    _ITEM_COLUMNS = "job_id, idx, backend, sample, prompt_hash, state, completion_ids, completion_source"

    def create_job(self, job: JobRecord, items: list[tuple[int, str, dict, str, int | None]]) -> None:
        """`items`: (index, backend, sample, prompt_hash, greedy completion length or None), inserted with the job
        in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    f"INSERT INTO jobs ({self._JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    ),
                )
                self._db.executemany(
                    "INSERT INTO job_items (job_id, idx, backend, sample, prompt_hash, state, greedy_tokens)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(job.id, i, b, json.dumps(sample), ph, "pending", g) for i, b, sample, ph, g in items],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return job_from_row(row) if row else None

    def job_ids_starting(self, prefix: str, limit: int = 2) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (*prefix_bounds(prefix), limit)
            ).fetchall()
        return [row[0] for row in rows]

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs ORDER BY created_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return [job_from_row(r) for r in rows]

    def job_counts(self, job_id: str) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute(
                "SELECT state, COUNT(*) FROM job_items WHERE job_id = ? GROUP BY state", (job_id,)
            ).fetchall()
            fetched = self._db.execute(
                "SELECT COUNT(*) FROM job_items WHERE job_id = ? AND completion_ids IS NOT NULL", (job_id,)
            ).fetchone()[0]
        return {**{state: count for state, count in rows}, "completions_fetched": fetched}

    def job_errors(self, job_id: str, limit: int = 100) -> list[tuple[int, str, str, str]]:
        with self._lock:
            return self._db.execute(
                "SELECT idx, backend, prompt_hash, error FROM job_items WHERE job_id = ? AND state = 'failed' "
                "ORDER BY idx LIMIT ?",
                (job_id, limit),
            ).fetchall()

    def set_job_state(
        self,
        job_id: str,
        state: str,
        started_at: str | None = None,
        finished_at: str | None = None,
        error: str | None = None,
    ) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET state = ?, started_at = COALESCE(started_at, ?), finished_at = ?, error = ?"
                " WHERE id = ?",
                (state, started_at, finished_at, error, job_id),
            )

    def add_job_work(self, job_id: str, tokens: int, busy_s: float) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET tokens = tokens + ?, busy_s = busy_s + ? WHERE id = ?", (tokens, busy_s, job_id)
            )

    def runnable_jobs(self, include_windowed: bool) -> list[JobRecord]:
        """Jobs with work left, highest priority first, then oldest; run-now jobs only unless the window is open."""
        where = "state IN ('queued', 'running')" + ("" if include_windowed else " AND run_now = 1")
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY priority DESC, created_at"
            ).fetchall()
        return [job_from_row(r) for r in rows]

    def pending_items(self, job_id: str, limit: int, needing_completion: bool = False) -> list[JobItem]:
        extra = " AND completion_ids IS NULL AND greedy_tokens IS NOT NULL" if needing_completion else ""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._ITEM_COLUMNS} FROM job_items WHERE job_id = ? AND state = 'pending'{extra} "
                "ORDER BY backend, idx LIMIT ?",
                (job_id, limit),
            ).fetchall()
        return [item_from_row(r) for r in rows]

    def finish_item(self, item: JobItem, state: str, content_hash: str | None = None, error: str | None = None) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE job_items SET state = ?, content_hash = ?, error = ?"
                " WHERE job_id = ? AND idx = ? AND backend = ?",
                (state, content_hash, error, item.job_id, item.index, item.backend),
            )

    def set_completion(self, job_id: str, index: int, completion_ids: list[int], source: str) -> None:
        """A reference completion for sample `index` of a job, shared by all its backends."""
        with self._lock:
            self._db.execute(
                "UPDATE job_items SET completion_ids = ?, completion_source = ? WHERE job_id = ? AND idx = ?",
                (json.dumps(completion_ids), source, job_id, index),
            )

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
