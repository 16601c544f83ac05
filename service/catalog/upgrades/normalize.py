"""The size migration: versions kept whole in the first schema's `versions` table (one manifest's JSON a row, ~2.6 KB
on the tiny model) move into the normalized tables (`schema/tables.py`'s NORMALIZED, rows as `manifest_rows` lays
them out), keeping each version's seq (a listing's cursor still names the same place), its audit and integrity
records, and counting the tallies as they go; then the old table is dropped. Keys, content hashes and manifests are
unchanged (`tests/service/catalog/sqlite/test_sqlite_catalog.py` reads a version of the first schema back, field for
field; `tests/service/catalog/upgrades/test_identity_migration.py` opens a store of an earlier release on both engines).

It reads the old table a batch at a time (bounded memory at any size), in the migration's one transaction: a
catalog of 10^6 versions takes a few minutes, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from service.catalog.versions.manifest_rows import (
    KeySpace,
    attention_of,
    body_of,
    content_bytes,
    count_into,
    fingerprint_row,
    prompt_bytes,
    sample_of,
)
from service.catalog.versions.references import FINGERPRINT_ID, INSERT_FINGERPRINT, INSERT_SPACE, SPACE_ID
from service.catalog.versions.rows import INSERT_SAMPLE

_BATCH = 5_000


# the tallies as this step wrote them: a migration step's SQL stays what it was when the step was written
_TALLY_V1 = (
    "INSERT INTO tallies (space, entries, tokens, bytes, flagged, damaged, suspect) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (space) DO UPDATE SET entries = tallies.entries + excluded.entries,"
    " tokens = tallies.tokens + excluded.tokens, bytes = tallies.bytes + excluded.bytes,"
    " flagged = tallies.flagged + excluded.flagged, damaged = tallies.damaged + excluded.damaged,"
    " suspect = tallies.suspect + excluded.suspect"
)


def normalize_versions(mark: str, overriding: str, after: str = "") -> Callable[[Any], None]:
    """The step for an engine whose placeholder is `mark`, which keeps a given seq with `overriding` (Postgres'
    `OVERRIDING SYSTEM VALUE`) and runs `after` once the rows are in (Postgres: the identity moved past them)."""

    def sql(statement: str) -> str:
        return statement.replace("?", mark)

    def step(conn: Any) -> None:
        spaces: dict[tuple[str, str, str], int] = {}
        fingerprints: dict[str, int] = {}
        tallies: dict[int, list[int]] = {}

        def space_of(manifest: Manifest) -> int:
            parts = (manifest.model_revision, manifest.backend, manifest.featureset_id)
            if parts not in spaces:
                conn.execute(sql(INSERT_SPACE), (*parts, KeySpace.of(manifest).featureset))
                spaces[parts] = int(conn.execute(sql(SPACE_ID), parts).fetchone()[0])
            return spaces[parts]

        def fingerprint_of(manifest: Manifest) -> int:
            digest, document = fingerprint_row(manifest.fingerprint)
            if digest not in fingerprints:
                conn.execute(sql(INSERT_FINGERPRINT), (digest, document))
                fingerprints[digest] = int(conn.execute(sql(FINGERPRINT_ID), (digest,)).fetchone()[0])
            return fingerprints[digest]

        last = 0
        while rows := conn.execute(
            sql("SELECT seq, manifest, audit, integrity FROM versions WHERE seq > ? ORDER BY seq LIMIT ?"),
            (last, _BATCH),
        ).fetchall():
            last = rows[-1][0]
            for seq, document, audit, integrity in rows:
                manifest = Manifest.model_validate_json(document).model_copy(
                    update={
                        "audit": AuditRecord.model_validate_json(audit) if audit else None,
                        "integrity": IntegrityRecord.model_validate_json(integrity) if integrity else None,
                    }
                )
                space, attention = space_of(manifest), attention_of(manifest)
                prompt = prompt_bytes(manifest.prompt_hash)
                conn.execute(sql(INSERT_SAMPLE), (prompt, sample_of(manifest)))
                conn.execute(
                    sql(
                        "INSERT INTO entry_versions (seq, prompt_hash, space, content_hash, fingerprint, num_tokens,"
                        f" created_at, attention, body, audit, integrity) {overriding}"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    (
                        seq,
                        prompt,
                        space,
                        content_bytes(manifest.content_hash),
                        fingerprint_of(manifest),
                        manifest.num_tokens,
                        manifest.created_at,
                        int(attention),
                        body_of(manifest),
                        audit,
                        integrity,
                    ),
                )
                count_into(tallies, space, manifest)
        for space, counts in tallies.items():  # the tallies of this step's schema: `unchecked` is a later step's
            conn.execute(sql(_TALLY_V1), (space, *counts[:6]))
        if after:
            conn.execute(after)
        conn.execute("DROP TABLE versions")

    return step
