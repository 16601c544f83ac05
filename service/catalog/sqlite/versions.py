"""Versions in SQLite: one row per (entry key, content hash), the manifest kept as JSON beside the key columns."""

from __future__ import annotations

import sqlite3

from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from service.catalog.migrations import Step
from service.catalog.sqlite.database import SqliteDatabase
from service.catalog.version_rows import KEY_COLUMNS, ROW, document_of, key_match, manifest_of, where_clause

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE INDEX IF NOT EXISTS versions_prompt ON versions (prompt_hash);
CREATE INDEX IF NOT EXISTS versions_created ON versions (created_at);
"""


def _add_record_columns(conn: sqlite3.Connection) -> None:
    """Catalogs made before audits and integrity checks were recorded lack their columns."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(versions)")}
    for column in ("audit", "integrity"):
        if column not in columns:
            conn.execute(f"ALTER TABLE versions ADD COLUMN {column} TEXT")


MIGRATIONS: list[Step] = [_SCHEMA, _add_record_columns]


class SqliteVersionCatalog:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        db.migrate("versions", MIGRATIONS)

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        key = tuple(getattr(manifest, c) for c in KEY_COLUMNS)
        with self.db.writing() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash,"
                " created_at, manifest) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*key, manifest.created_at, document_of(manifest)),
            )
            added = cursor.rowcount == 1
            row = conn.execute(f"{ROW} WHERE {key_match('?')}", key).fetchone()
        return manifest_of(*row), added

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"{ROW} WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                " AND featureset_id = ? ORDER BY seq DESC",
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [manifest_of(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clause, params = where_clause(where, after_seq, "?")
        with self.db.connection() as conn:
            rows = conn.execute(f"{ROW} WHERE {clause} ORDER BY seq LIMIT ?", (*params, limit)).fetchall()
        return [manifest_of(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self.db.writing() as conn:
            conn.execute(
                f"UPDATE versions SET audit = ? WHERE {key_match('?')}",
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
                "UPDATE versions SET integrity = ? WHERE content_hash = ?",
                (record.model_dump_json() if record is not None else None, content_hash),
            )

    def count(self) -> int:
        with self.db.connection() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def ping(self) -> None:
        self.db.ping()
