"""The SQLite catalog: one row per (entry key, content hash), the manifest kept as JSON beside the key columns."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from schemas.keys import EntryKey
from schemas.manifest import AuditRecord, Manifest
from service.catalog.protocol import EntryFilter

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
    UNIQUE (prompt_hash, model_revision, backend, featureset_id, content_hash)
);
CREATE INDEX IF NOT EXISTS versions_prompt ON versions (prompt_hash);
CREATE INDEX IF NOT EXISTS versions_created ON versions (created_at);
"""
_COLUMNS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")


class SqliteCatalog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the server's worker threads, serialised by a lock; WAL lets readers in other
        # processes (the CLI, a second replica) read while we write.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(versions)")}
            if "audit" not in columns:  # catalogs written before audits existed
                self._db.execute("ALTER TABLE versions ADD COLUMN audit TEXT")

    def _row_to_manifest(self, seq: int, document: str, audit: str | None) -> Manifest:
        update: dict[str, object] = {"seq": seq}
        if audit is not None:
            update["audit"] = AuditRecord.model_validate_json(audit)
        return Manifest.model_validate_json(document).model_copy(update=update)

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        document = manifest.model_copy(update={"seq": None, "audit": None}).model_dump_json()
        values = (*(getattr(manifest, c) for c in _COLUMNS), manifest.created_at, document)
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash,"
                " created_at, manifest) VALUES (?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            added = cursor.rowcount == 1
            row = self._db.execute(
                "SELECT seq, manifest, audit FROM versions WHERE " + " AND ".join(f"{c} = ?" for c in _COLUMNS),
                values[: len(_COLUMNS)],
            ).fetchone()
        return self._row_to_manifest(*row), added

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, manifest, audit FROM versions WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                " AND featureset_id = ? ORDER BY seq DESC",
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [self._row_to_manifest(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clauses, params = ["seq > ?"], [after_seq]
        for column in _COLUMNS:
            if (value := getattr(where, column)) is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if where.since is not None:
            clauses.append("created_at >= ?")
            params.append(where.since)
        with self._lock:
            rows = self._db.execute(
                f"SELECT seq, manifest, audit FROM versions WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [self._row_to_manifest(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self._lock:
            self._db.execute(
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

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
