"""Versions in Postgres: one row per (entry key, content hash), the manifest kept as its JSON text (byte for byte
what was recorded) beside the key columns."""

from __future__ import annotations

from schemas.keys import EntryFilter, EntryKey, prefix_bounds
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from service.catalog.postgres.database import PostgresDatabase

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
_ROW = "SELECT seq, manifest, audit, integrity FROM versions"
_KEY_COLUMNS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")
_FILTER_COLUMNS = {
    "prompt_hash": "prompt_hash",
    "model_revision": "model_revision",
    "backend": "backend",
    "featureset": "featureset_id",
    "content_hash": "content_hash",
}
_PREFIXED = ("prompt_hash", "content_hash")
_KEY_MATCH = " AND ".join(f"{c} = %s" for c in _KEY_COLUMNS)


def _manifest(seq: int, document: str, audit: str | None, integrity: str | None) -> Manifest:
    update: dict[str, object] = {"seq": seq}
    if audit is not None:
        update["audit"] = AuditRecord.model_validate_json(audit)
    if integrity is not None:
        update["integrity"] = IntegrityRecord.model_validate_json(integrity)
    return Manifest.model_validate_json(document).model_copy(update=update)


class PostgresVersionCatalog:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        db.migrate("versions", MIGRATIONS)

    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        document = manifest.model_copy(update={"seq": None, "audit": None, "integrity": None}).model_dump_json()
        key = tuple(getattr(manifest, c) for c in _KEY_COLUMNS)
        with self.db.writing() as conn:
            inserted = conn.execute(
                "INSERT INTO versions (prompt_hash, model_revision, backend, featureset_id, content_hash, created_at,"
                " manifest) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq",
                (*key, manifest.created_at, document),
            ).fetchone()
            row = conn.execute(f"{_ROW} WHERE {_KEY_MATCH}", key).fetchone()
        return _manifest(*row), inserted is not None

    def versions(self, key: EntryKey) -> list[Manifest]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"{_ROW} WHERE prompt_hash = %s AND model_revision = %s AND backend = %s AND featureset_id = %s"
                " ORDER BY seq DESC",
                (key.prompt_hash, key.model_revision, key.backend, key.featureset_id),
            ).fetchall()
        return [_manifest(*row) for row in rows]

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        clauses, params = ["seq > %s"], [after_seq]
        for field, column in _FILTER_COLUMNS.items():
            if (value := getattr(where, field)) is None:
                continue
            if field in _PREFIXED:  # a range on text_pattern_ops keeps the index usable
                clauses.append(f"{column} >= %s AND {column} < %s")
                params.extend(prefix_bounds(value))
            else:
                clauses.append(f"{column} = %s")
                params.append(value)
        if where.since is not None:
            clauses.append("created_at >= %s")
            params.append(where.since)
        with self.db.connection() as conn:
            rows = conn.execute(
                f"{_ROW} WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT %s", (*params, limit)
            ).fetchall()
        return [_manifest(*row) for row in rows]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        with self.db.writing() as conn:
            conn.execute(
                f"UPDATE versions SET audit = %s WHERE {_KEY_MATCH}",
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
