"""Versions in SQLite: one row per (entry key, content hash), the manifest kept as JSON beside the key columns."""

from __future__ import annotations

import sqlite3

from schemas.keys import EntryFilter, EntryKey, prefix_bounds
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from service.catalog.migrations import Step
from service.catalog.sqlite.database import SqliteDatabase

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
_ROW = "SELECT seq, manifest, audit, integrity FROM versions"
_KEY_COLUMNS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")
# filter field -> column; the hashes match as prefixes
_FILTER_COLUMNS = {
    "prompt_hash": "prompt_hash",
    "model_revision": "model_revision",
    "backend": "backend",
    "featureset": "featureset_id",
    "content_hash": "content_hash",
}
_PREFIXED = ("prompt_hash", "content_hash")


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

    @staticmethod
    def _manifest(seq: int, document: str, audit: str | None, integrity: str | None) -> Manifest:
        update: dict[str, object] = {"seq": seq}
        if audit is not None:
            update["audit"] = AuditRecord.model_validate_json(audit)
        if integrity is not None:
            update["integrity"] = IntegrityRecord.model_validate_json(integrity)
        return Manifest.model_validate_json(document).model_copy(update=update)

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        document = manifest.model_copy(update={"seq": None, "audit": None, "integrity": None}).model_dump_json()
        key = tuple(getattr(manifest, c) for c in _KEY_COLUMNS)
        with self.db.writing() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash,"
                " created_at, manifest) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*key, manifest.created_at, document),
            )
            added = cursor.rowcount == 1
            row = conn.execute(
                "SELECT seq, manifest, audit, integrity FROM versions WHERE "
                + " AND ".join(f"{c} = ?" for c in _KEY_COLUMNS),
                key,
            ).fetchone()
        return self._manifest(*row), added

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"{_ROW} WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                " AND featureset_id = ? ORDER BY seq DESC",
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [self._manifest(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clauses, params = ["seq > ?"], [after_seq]
        for field, column in _FILTER_COLUMNS.items():
            if (value := getattr(where, field)) is None:
                continue
            if field in _PREFIXED:  # a range keeps the index usable, as LIKE would not
                clauses.append(f"{column} >= ? AND {column} < ?")
                params.extend(prefix_bounds(value))
            else:
                clauses.append(f"{column} = ?")
                params.append(value)
        if where.since is not None:
            clauses.append("created_at >= ?")
            params.append(where.since)
        with self.db.connection() as conn:
            rows = conn.execute(
                f"{_ROW} WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [self._manifest(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self.db.writing() as conn:
            conn.execute(
                "UPDATE versions SET audit = ? WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                " AND featureset_id = ? AND content_hash = ?",
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
