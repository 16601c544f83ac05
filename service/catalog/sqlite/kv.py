"""The key/value table in SQLite."""

from __future__ import annotations

from service.catalog.schema.tables import KV, SQLITE, render
from service.catalog.sqlite.database import SqliteDatabase

MIGRATIONS = [render(KV, SQLITE)]


class SqliteKeyValue:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        db.migrate("kv", MIGRATIONS)

    def kv_get(self, name: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute("SELECT value FROM kv WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def kv_set(self, name: str, value: str | None) -> None:
        with self.db.writing() as conn:
            conn.execute("INSERT OR REPLACE INTO kv (name, value) VALUES (?, ?)", (name, value))
