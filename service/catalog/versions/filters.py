"""What a listing's filter becomes in SQL, the same on every engine: each part an equality or a range on its index
(a hash prefix a range on the hash's), and beside a hash only that hash's index read (rows.py says why)."""

from __future__ import annotations

from schemas.keys import EntryFilter
from service.catalog.versions.manifest_rows import hex_prefix_range


def filter_clause(
    where: EntryFilter, spaces: list[int] | None, hashed: bool, after_seq: int
) -> tuple[str, list[object]]:
    """The WHERE clause of a filtered listing over `spaces` (None: any) and its parameters."""
    # Beside a hash, its index alone must be read: `+` keeps the cursor and the key space from being the index
    # the planner walks instead (the table in seq order, or a key space's every version, for one prompt)
    seq, space = ("+v.seq", "+v.space") if hashed else ("v.seq", "v.space")
    clauses = [f"{seq} > ?"]
    params: list[object] = [after_seq]
    if spaces is not None:
        clauses.append(f"{space} IN ({', '.join('?' * len(spaces))})" if len(spaces) > 1 else f"{space} = ?")
        params.extend(spaces)
    for column, value in (
        ("v.prompt_hash", where.prompt_hash),
        ("v.content_hash", where.content_hash and where.content_hash.removeprefix("sha256:")),
    ):
        if value is None:
            continue
        if len(value) == 64:
            clauses.append(f"{column} = ?")
            params.append(bytes.fromhex(value))
            continue
        low, high = hex_prefix_range(value)
        clauses.append(f"{column} >= ?" + ("" if high is None else f" AND {column} < ?"))
        params.extend([low] if high is None else [low, high])
    if where.since is not None:
        clauses.append("v.created_at >= ?")
        params.append(where.since)
    return " AND ".join(clauses), params
