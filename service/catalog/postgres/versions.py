"""Versions in Postgres: one row per (entry key, content hash), the manifest kept as its JSON text (byte for byte
what was recorded) beside the key columns."""

from __future__ import annotations

from typing import Any

from schemas.manifest import Manifest
from service.catalog.postgres.database import PostgresDatabase
from service.catalog.version_rows import SqlVersionCatalog, document_of

MIGRATIONS = [
    """
CREATE TABLE versions (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    prompt_hash    TEXT NOT NULL,
    model_revision TEXT NOT NULL,
    backend        TEXT NOT NULL,
    featureset_id  TEXT NOT NULL,
    content_hash   TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    manifest       TEXT NOT NULL,
    audit          TEXT,
    integrity      TEXT,
    UNIQUE (prompt_hash, model_revision, backend, featureset_id, content_hash)
);
CREATE INDEX versions_prompt ON versions (prompt_hash text_pattern_ops);
CREATE INDEX versions_content ON versions (content_hash text_pattern_ops);
CREATE INDEX versions_created ON versions (created_at)
"""
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
