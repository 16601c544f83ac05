"""Versions in SQLite: one row per (entry key, content hash), the manifest kept as JSON beside the key columns."""

from __future__ import annotations

import sqlite3
from typing import Any

from schemas.manifest import Manifest
from service.catalog.migrations import Step
from service.catalog.rekey import rekey_versions
from service.catalog.sql_schema import PROMPT_ALIASES, SQLITE, VERSIONS, render
from service.catalog.sqlite.database import SqliteDatabase
from service.catalog.version_rows import SqlVersionCatalog, document_of


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
]


class SqliteVersionCatalog(SqlVersionCatalog):
    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        db.migrate("versions", MIGRATIONS)

    def _insert(self, conn: Any, key: tuple, manifest: Manifest) -> bool:
        cursor = conn.execute(
            "INSERT OR IGNORE INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash,"
            " created_at, manifest) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*key, manifest.created_at, document_of(manifest)),
        )
        return cursor.rowcount == 1
