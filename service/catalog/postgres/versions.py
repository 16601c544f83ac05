"""Versions in Postgres: one row per (entry key, content hash), the manifest kept as its JSON text (byte for byte
what was recorded) beside the key columns."""

from __future__ import annotations

from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from service.catalog.postgres.database import PostgresDatabase
from service.catalog.version_rows import KEY_COLUMNS, ROW, document_of, key_match, manifest_of, where_clause

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


class PostgresVersionCatalog:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        db.migrate("versions", MIGRATIONS)

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        key = tuple(getattr(manifest, c) for c in KEY_COLUMNS)
        with self.db.writing() as conn:
            inserted = conn.execute(
                "INSERT INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash, created_at,"
                " manifest) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq",
                (*key, manifest.created_at, document_of(manifest)),
            ).fetchone()
            row = conn.execute(f"{ROW} WHERE {key_match('%s')}", key).fetchone()
        return manifest_of(*row), inserted is not None

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"{ROW} WHERE prompt_hash = %s AND model_revision = %s AND backend = %s AND featureset_id = %s"
                " ORDER BY seq DESC",
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [manifest_of(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clause, params = where_clause(where, after_seq, "%s")
        with self.db.connection() as conn:
            rows = conn.execute(f"{ROW} WHERE {clause} ORDER BY seq LIMIT %s", (*params, limit)).fetchall()
        return [manifest_of(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self.db.writing() as conn:
            conn.execute(
                f"UPDATE versions SET audit = %s WHERE {key_match('%s')}",
                (
                    record.model_dump_json(),
                    key.prompt_hash,
                    key.model_revision,
                    key.backend,
                    key.featureset_id,
                    content_hash,
                ),
            )

    def set_integrity(self, content_hash: str, record: IntegrityRecord | None) -> None:
        with self.db.writing() as conn:
            conn.execute(
                "UPDATE versions SET integrity = %s WHERE content_hash = %s",
                (record.model_dump_json() if record is not None else None, content_hash),
            )

    def count(self) -> int:
        with self.db.connection() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def ping(self) -> None:
        self.db.ping()
