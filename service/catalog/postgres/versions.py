"""Versions in Postgres: the normalized rows of `versions/rows.py`, inserted unless their key is there."""

from __future__ import annotations

from typing import Any

from service.catalog.postgres.database import PostgresDatabase
from service.catalog.schema.migrations import Step
from service.catalog.schema.tables import NORMALIZED, POSTGRES, PROMPT_ALIASES, TALLY_UNCHECKED, VERSIONS, render
from service.catalog.upgrades.normalize import normalize_versions
from service.catalog.upgrades.rekey import rekey_versions
from service.catalog.versions.rows import SqlVersionCatalog

# the copied versions keep their seq; the identity then starts after the last of them
_PAST_THE_COPIED = (
    "SELECT setval(pg_get_serial_sequence('entry_versions', 'seq'),"
    " (SELECT COALESCE(MAX(seq), 0) + 1 FROM entry_versions), false)"
)
MIGRATIONS: list[Step] = [
    render(VERSIONS, POSTGRES),
    render(PROMPT_ALIASES, POSTGRES),
    rekey_versions("%s"),
    render(NORMALIZED, POSTGRES),
    normalize_versions("%s", overriding="OVERRIDING SYSTEM VALUE", after=_PAST_THE_COPIED),
    render(TALLY_UNCHECKED, POSTGRES),
]


_INSERT = (
    "INSERT INTO entry_versions (prompt_hash, space, content_hash, fingerprint, num_tokens, created_at, attention,"
    " body) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq"
)


class PostgresVersionCatalog(SqlVersionCatalog):
    placeholder = "%s"

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db)
        db.migrate("versions", MIGRATIONS)

    def _insert(self, conn: Any, values: tuple) -> bool:
        return conn.execute(_INSERT, values).fetchone() is not None

    def _insert_many(self, conn: Any, rows: list[tuple]) -> list[bool]:
        """One pipelined batch (psycopg's executemany), each row's RETURNING read back: a round trip a batch."""
        added = []
        with conn.cursor() as cursor:
            cursor.executemany(_INSERT, rows, returning=True)
            while True:
                added.append(cursor.fetchone() is not None)
                if not cursor.nextset():
                    break
        return added

    def _many(self, conn: Any, statement: str, rows: list[tuple]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(statement, rows)
