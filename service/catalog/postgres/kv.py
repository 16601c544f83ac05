"""The key/value table in Postgres."""

from __future__ import annotations

from service.catalog.postgres.database import PostgresDatabase
from service.catalog.schema.tables import KV, POSTGRES, render

MIGRATIONS = [render(KV, POSTGRES)]


class PostgresKeyValue:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        db.migrate("kv", MIGRATIONS)

    def kv_get(self, name: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute("SELECT value FROM kv WHERE name = %s", (name,)).fetchone()
        return row[0] if row else None

    def kv_set(self, name: str, value: str | None) -> None:
        with self.db.writing() as conn:
            conn.execute(
                "INSERT INTO kv (name, value) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )
