"""Versions in SQLite: the normalized rows of `versions/rows.py`, inserted unless their key is there."""

from __future__ import annotations

import sqlite3
from typing import Any

from service.catalog.schema.migrations import Step
from service.catalog.schema.tables import NORMALIZED, PROMPT_ALIASES, SQLITE, TALLY_UNCHECKED, VERSIONS, render
from service.catalog.sqlite.database import SqliteDatabase
from service.catalog.upgrades.normalize import normalize_versions
from service.catalog.upgrades.rekey import rekey_versions
from service.catalog.versions.rows import SqlVersionCatalog


def _add_record_columns(conn: sqlite3.Connection) -> None:
    """Catalogs made before audits and integrity checks were recorded lack their columns."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(versions)")}
    for column in ("audit", "integrity"):
        if column not in columns:
            conn.execute(f"ALTER TABLE versions ADD COLUMN {column} TEXT")


MIGRATIONS: list[Step] = [
    render(VERSIONS, SQLITE),
    _add_record_columns,
    render(PROMPT_ALIASES, SQLITE),
    rekey_versions("?"),
    render(NORMALIZED, SQLITE),
    normalize_versions("?", overriding=""),  # an explicit seq is kept, and AUTOINCREMENT moves past it
    render(TALLY_UNCHECKED, SQLITE),
]


_INSERT = (
    "INSERT OR IGNORE INTO entry_versions (prompt_hash, space, content_hash, fingerprint, num_tokens, created_at,"
    " attention, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class SqliteVersionCatalog(SqlVersionCatalog):
    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        db.migrate("versions", MIGRATIONS)

    def _insert(self, conn: Any, values: tuple) -> bool:
        return bool(conn.execute(_INSERT, values).rowcount == 1)

    def _insert_many(self, conn: Any, rows: list[tuple]) -> list[bool]:
        return [self._insert(conn, row) for row in rows]  # in-process: a statement costs microseconds

    def _many(self, conn: Any, statement: str, rows: list[tuple]) -> None:
        conn.executemany(statement, rows)
