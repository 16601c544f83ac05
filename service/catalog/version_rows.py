"""Versions as every catalog engine keeps them: one row per (entry key, content hash) with the manifest's JSON, the
last audit and integrity check beside it. The columns, the filter and the row decoding are the same SQL everywhere but
for the placeholder, so they live here once."""

from __future__ import annotations

from schemas.keys import EntryFilter, prefix_bounds
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest

ROW = "SELECT seq, manifest, audit, integrity FROM versions"
KEY_COLUMNS = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")
# filter field -> column; the hashes match as prefixes
_FILTER_COLUMNS = {
    "prompt_hash": "prompt_hash",
    "model_revision": "model_revision",
    "backend": "backend",
    "featureset": "featureset_id",
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


def key_match(mark: str) -> str:
    return " AND ".join(f"{column} = {mark}" for column in KEY_COLUMNS)


def where_clause(where: EntryFilter, after_seq: int, mark: str) -> tuple[str, list[object]]:
    """The WHERE clause (and its parameters) of a filtered listing; `mark` is the engine's placeholder."""
    clauses, params = [f"seq > {mark}"], [after_seq]
    for field, column in _FILTER_COLUMNS.items():
        if (value := getattr(where, field)) is None:
            continue
        if field in _PREFIXED:  # a range keeps the index usable, as LIKE would not
            clauses.append(f"{column} >= {mark} AND {column} < {mark}")
            params.extend(prefix_bounds(value))
        else:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if where.since is not None:
        clauses.append(f"created_at >= {mark}")
        params.append(where.since)
    return " AND ".join(clauses), params
