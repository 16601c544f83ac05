"""Warm jobs in Postgres: its schema, clock and claim (the statements are sql_jobs.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.states import ItemState
from service.catalog.postgres.database import PostgresDatabase
from service.catalog.sql_jobs import ITEM_COLUMNS, SqlJobStore

MIGRATIONS = [
    """
CREATE TABLE jobs (
    id          TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    priority    INTEGER NOT NULL,
    run_now     BOOLEAN NOT NULL,
    backends    TEXT NOT NULL,
    featureset  TEXT NOT NULL,
    completion  TEXT,
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    tokens      BIGINT NOT NULL DEFAULT 0,
    busy_s      DOUBLE PRECISION NOT NULL DEFAULT 0,
    error       TEXT
);
CREATE INDEX jobs_id ON jobs (id text_pattern_ops);
CREATE TABLE job_items (
    job_id            TEXT NOT NULL REFERENCES jobs (id),
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
CREATE INDEX job_items_pending ON job_items (job_id, state)
""",
    "ALTER TABLE job_items ADD COLUMN lease_owner TEXT; ALTER TABLE job_items ADD COLUMN lease_until DOUBLE PRECISION",
    "ALTER TABLE jobs ADD COLUMN existing INTEGER NOT NULL DEFAULT 0",  # items found already stored
]
_NOW = "EXTRACT(EPOCH FROM clock_timestamp())"  # the database's clock: every host's workers agree on it


class PostgresJobStore(SqlJobStore):
    placeholder = "%s"
    now = _NOW

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db)
        db.migrate("jobs", MIGRATIONS)

    def _many(self, conn: Any, statement: str, rows: Sequence[tuple]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(statement, rows)

    def _claiming(self) -> Any:
        return self.db.writing()

    def _claim(self, conn: Any, job_id: str, worker: str, limit: int, lease_s: float, backend: str | None) -> list:
        """One statement: rows another worker is claiming right now are skipped, not waited for."""
        return conn.execute(
            self._sql(
                """
                UPDATE job_items SET lease_owner = ?, lease_until = {now} + ?
                WHERE (job_id, idx, backend) IN (
                    SELECT job_id, idx, backend FROM job_items
                    WHERE job_id = ? AND state = ? AND (lease_until IS NULL OR lease_until < {now})
                        AND (?::text IS NULL OR backend = ?::text)
                    ORDER BY backend, idx LIMIT ?
                    FOR UPDATE SKIP LOCKED
                )
                """
                f"RETURNING {ITEM_COLUMNS}"
            ),
            (worker, lease_s, job_id, ItemState.PENDING, backend, backend, limit),
        ).fetchall()
