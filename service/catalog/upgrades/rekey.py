"""The identity migration: versions and job items recorded under the rule before the normal form (a sample's hash
taken over its null members too) move to the key their sample has now, and the old prompt hash becomes an alias of
the new one, so a hash a client still holds (a dataset snapshot, an eval script's list) reads the same entry.

Only samples with a null member move. Two versions that meet under one key with one content hash (a sample sent once
plain and once through Arrow, nulls filled in) are one version: the row already there is kept, with the other's audit
if it had none. The manifest documents on disk are left as written: a rebuild of the catalog re-keys them alike
(`service/core/trust/rebuild.py`). The blobs are untouched: a content hash never depended on the sample.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from schemas.manifest import Manifest
from schemas.prompt_hash import prompt_hash, prompt_hash_as_sent, sample_identity
from service.catalog.versions.rows import RECORD_MOVE

_BATCH = 5_000  # rows read at a time: the migration's memory stays bounded at any catalog size


def v1_document(manifest: Manifest) -> str:
    """The first schema's `versions.manifest`: the whole manifest but what the catalog adds (this step's only)."""
    return manifest.model_copy(update={"seq": None, "audit": None, "integrity": None}).model_dump_json()


def rekeyed(manifest: Manifest) -> Manifest | None:
    """The manifest under its sample's key today, or None if it is already there (or was never keyed by its
    sample under either rule: nothing to say where it belongs)."""
    new = prompt_hash(manifest.sample)
    if new == manifest.prompt_hash or manifest.prompt_hash != prompt_hash_as_sent(manifest.sample):
        return None
    return manifest.model_copy(update={"prompt_hash": new, "sample": sample_identity(manifest.sample)})


def rekey_versions(mark: str) -> Callable[[Any], None]:
    """The versions part's step for an engine whose placeholder is `mark`."""

    def sql(statement: str) -> str:
        return _placed(statement, mark)

    def step(conn: Any) -> None:
        after = 0
        while rows := conn.execute(
            sql("SELECT seq, manifest, audit FROM versions WHERE seq > ? ORDER BY seq LIMIT ?"), (after, _BATCH)
        ).fetchall():
            after = rows[-1][0]
            for seq, document, audit in rows:
                manifest = Manifest.model_validate_json(document)
                moved = rekeyed(manifest)
                if moved is None:
                    continue
                key = (moved.prompt_hash, moved.model_revision, moved.backend, moved.featureset_id, moved.content_hash)
                twin = conn.execute(
                    sql(
                        "SELECT seq, audit FROM versions WHERE prompt_hash = ? AND model_revision = ? AND backend = ?"
                        " AND featureset_id = ? AND content_hash = ?"
                    ),
                    key,
                ).fetchone()
                if twin is None:
                    conn.execute(
                        sql("UPDATE versions SET prompt_hash = ?, manifest = ? WHERE seq = ?"),
                        (moved.prompt_hash, v1_document(moved), seq),
                    )
                else:
                    if twin[1] is None and audit is not None:
                        conn.execute(sql("UPDATE versions SET audit = ? WHERE seq = ?"), (audit, twin[0]))
                    conn.execute(sql("DELETE FROM versions WHERE seq = ?"), (seq,))
                conn.execute(sql(RECORD_MOVE), (manifest.prompt_hash, moved.prompt_hash))

    return step


def rekey_job_items(mark: str) -> Callable[[Any], None]:
    """The jobs part's step: each item's prompt hash as its sample has it now (the sample itself stays as sent)."""

    def step(conn: Any) -> None:
        after: tuple[str, int, str] = ("", -1, "")
        while rows := conn.execute(
            _placed(
                "SELECT job_id, idx, backend, sample, prompt_hash FROM job_items"
                " WHERE (job_id, idx, backend) > (?, ?, ?) ORDER BY job_id, idx, backend LIMIT ?",
                mark,
            ),
            (*after, _BATCH),
        ).fetchall():
            after = rows[-1][:3]
            for job_id, idx, backend, sample, old in rows:
                if (new := prompt_hash(json.loads(sample))) != old:
                    conn.execute(
                        _placed(
                            "UPDATE job_items SET prompt_hash = ? WHERE job_id = ? AND idx = ? AND backend = ?", mark
                        ),
                        (new, job_id, idx, backend),
                    )

    return step


def _placed(statement: str, mark: str) -> str:
    return statement.replace("?", mark)
