"""Warm jobs in Postgres: its schema, clock and claim (the statements are jobs/rows.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.states import ItemState
from service.catalog.jobs.rows import ITEM_COLUMNS, NEW_ITEM_COLUMNS, SqlJobStore
from service.catalog.postgres.database import PostgresDatabase
from service.catalog.schema.migrations import Step
from service.catalog.schema.tables import (
    JOB_LEASE_INDEX,
    JOB_LEASES,
    JOB_TALLIES,
    JOBS,
    JOBS_EXISTING,
    POSTGRES,
    render,
)
from service.catalog.upgrades.rekey import rekey_job_items

MIGRATIONS: list[Step] = [
    *(render(step, POSTGRES) for step in (JOBS, JOB_LEASES, JOBS_EXISTING)),
    rekey_job_items("%s"),
    render(JOB_TALLIES, POSTGRES),
    render(JOB_LEASE_INDEX, POSTGRES),
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

    def _insert_items(self, conn: Any, rows: Sequence[tuple]) -> None:
        """COPY, not an INSERT per row: what a 10^6-sample job's submission spends here in this process fell from
        15.6 to 0.9 CPU-seconds (measured over 2 x 10^5 rows of this shape; benchmarks/job_submit.py end to end)."""
        with conn.cursor() as cursor, cursor.copy(f"COPY job_items ({', '.join(NEW_ITEM_COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def _restate_items(self) -> None:
        """ANALYZE job_items now: the claim's index is chosen from statistics, and autovacuum's come late."""
        with self.db.writing() as conn:
            conn.execute("ANALYZE job_items")

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
