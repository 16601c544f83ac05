"""Versions in Postgres: one row per (entry key, content hash), the manifest kept as its JSON text (byte for byte
what was recorded) beside the key columns."""

from __future__ import annotations

from typing import Any

from schemas.manifest import Manifest
from service.catalog.migrations import Step
from service.catalog.postgres.database import PostgresDatabase
from service.catalog.rekey import rekey_versions
from service.catalog.sql_schema import POSTGRES, PROMPT_ALIASES, VERSIONS, render
from service.catalog.version_rows import SqlVersionCatalog, document_of

MIGRATIONS: list[Step] = [
    render(VERSIONS, POSTGRES),
    render(PROMPT_ALIASES, POSTGRES),
    rekey_versions("%s"),
]


class PostgresVersionCatalog(SqlVersionCatalog):
    placeholder = "%s"

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db)
        db.migrate("versions", MIGRATIONS)

    def _insert(self, conn: Any, key: tuple, manifest: Manifest) -> bool:
        inserted = conn.execute(
            "INSERT INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash, created_at,"
            " manifest) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq",
            (*key, manifest.created_at, document_of(manifest)),
        ).fetchone()
        return inserted is not None
