"""Warm jobs in SQLite: its schema, clock and claim (the statements are jobs/rows.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.states import ItemState
from service.catalog.jobs.rows import ITEM_COLUMNS, SqlJobStore
from service.catalog.schema.migrations import Step
from service.catalog.schema.tables import JOB_LEASE_INDEX, JOB_LEASES, JOB_TALLIES, JOBS, JOBS_EXISTING, SQLITE, render
from service.catalog.sqlite.database import SqliteDatabase
from service.catalog.upgrades.rekey import rekey_job_items

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # the database's clock, in epoch seconds
MIGRATIONS: list[Step] = [
    *(render(step, SQLITE) for step in (JOBS, JOB_LEASES, JOBS_EXISTING)),
    rekey_job_items("?"),
    render(JOB_TALLIES, SQLITE),
    render(JOB_LEASE_INDEX, SQLITE),
]


class SqliteJobStore(SqlJobStore):
    now = _NOW

    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        db.migrate("jobs", MIGRATIONS)

    def _many(self, conn: Any, statement: str, rows: Sequence[tuple]) -> None:
        conn.executemany(statement, rows)

    def _claiming(self) -> Any:
        return self.db.transaction()  # BEGIN: SQLite's one writer at a time makes the select-then-lease atomic

    def _claim(self, conn: Any, job_id: str, worker: str, limit: int, lease_s: float, backend: str | None) -> list:
        rows = conn.execute(
            self._sql(
                f"SELECT {ITEM_COLUMNS} FROM job_items WHERE job_id = ? AND state = ?"
                " AND (lease_until IS NULL OR lease_until < {now}) AND (? IS NULL OR backend = ?)"
                " ORDER BY backend, idx LIMIT ?"
            ),
            (job_id, ItemState.PENDING, backend, backend, limit),
        ).fetchall()
        self._many(
            conn,
            self._sql(
                "UPDATE job_items SET lease_owner = ?, lease_until = {now} + ?"
                " WHERE job_id = ? AND idx = ? AND backend = ?"
            ),
            [(worker, lease_s, job_id, row[1], row[2]) for row in rows],
        )
        return rows
