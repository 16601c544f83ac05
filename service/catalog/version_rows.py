"""Versions as every catalog engine keeps them: one row per (entry key, content hash) with the manifest's JSON, the
last audit and integrity check beside it. The columns, the filter, the statements and the row decoding are the same
SQL everywhere but for the placeholder, so they live here once; an engine says only how it inserts."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from schemas.keys import EntryFilter, EntryKey, prefix_bounds
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from service.catalog.sql_dialect import Dialect

ROW = "SELECT seq, manifest, audit, integrity FROM versions"
KEY_COLUMNS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")
# filter field -> column; the hashes match as prefixes
_FILTER_COLUMNS = {
    "prompt_hash": "prompt_hash",
    "model_revision": "model_revision",
    "backend": "backend",
    "featureset_id": "featureset_id",
    "content_hash": "content_hash",
}
_PREFIXED = ("prompt_hash", "content_hash")


def manifest_of(seq: int, document: str, audit: str | None, integrity: str | None) -> Manifest:
    """A `ROW` as the manifest readers see: the stored document with its seq, audit and integrity."""
    update: dict[str, object] = {"seq": seq}
    if audit is not None:
        update["audit"] = AuditRecord.model_validate_json(audit)
    if integrity is not None:
        update["integrity"] = IntegrityRecord.model_validate_json(integrity)
    return Manifest.model_validate_json(document).model_copy(update=update)


def document_of(manifest: Manifest) -> str:
    """What a row keeps: the manifest without what the catalog adds."""
    return manifest.model_copy(update={"seq": None, "audit": None, "integrity": None}).model_dump_json()


# an old prompt hash's alias, recorded once (the migration's re-keying and the rebuild's both record it)
RECORD_MOVE = "INSERT INTO prompt_aliases (old_hash, prompt_hash) VALUES (?, ?) ON CONFLICT DO NOTHING"
KEY_MATCH = " AND ".join(f"{column} = ?" for column in KEY_COLUMNS)


def where_clause(where: EntryFilter, after_seq: int) -> tuple[str, list[object]]:
    """The WHERE clause (and its parameters) of a filtered listing."""
    clauses, params = ["seq > ?"], list[object]([after_seq])
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
    return " AND ".join(clauses), params


class SqlVersionCatalog(Dialect, ABC):
    """The statements of every engine's catalog but the insert, whose "added or already there" each says its way."""

    def __init__(self, db: Any) -> None:
        self.db = db

    @abstractmethod
    def _insert(self, conn: Any, key: tuple, manifest: Manifest) -> bool:
        """Insert the version unless its key is there; whether it was added."""

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        key = tuple(getattr(manifest, c) for c in KEY_COLUMNS)
        with self.db.writing() as conn:
            added = self._insert(conn, key, manifest)
            row = conn.execute(self._sql(f"{ROW} WHERE {KEY_MATCH}"), key).fetchone()
        return manifest_of(*row), added

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(
                    f"{ROW} WHERE prompt_hash = ? AND model_revision = ? AND backend = ? AND featureset_id = ?"
                    " ORDER BY seq DESC"
                ),
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [manifest_of(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clause, params = where_clause(where, after_seq)
        with self.db.connection() as conn:
            rows = conn.execute(self._sql(f"{ROW} WHERE {clause} ORDER BY seq LIMIT ?"), (*params, limit)).fetchall()
        return [manifest_of(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self.db.writing() as conn:
            conn.execute(
                self._sql(f"UPDATE versions SET audit = ? WHERE {KEY_MATCH}"),
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
                self._sql("UPDATE versions SET integrity = ? WHERE content_hash = ?"),
                (record.model_dump_json() if record is not None else None, content_hash),
            )

    def moved_to(self, prompt_hash: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute(
                self._sql("SELECT prompt_hash FROM prompt_aliases WHERE old_hash = ?"), (prompt_hash,)
            ).fetchone()
        return None if row is None else str(row[0])

    def record_move(self, old_hash: str, prompt_hash: str) -> None:
        with self.db.writing() as conn:
            conn.execute(self._sql(RECORD_MOVE), (old_hash, prompt_hash))

    def count(self) -> int:
        with self.db.connection() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def ping(self) -> None:
        self.db.ping()
