"""Versions as every catalog engine keeps them (`schema/tables.py`'s NORMALIZED, rows as `manifest_rows` lays them
out): the statements, the filters and the tallies are the same SQL everywhere but for the placeholder, so they live
here once; an engine says only how it inserts a row unless it is there.

Every statement that names a key reads through an index, whatever the size of the table: an exact hash is an
equality on its index, a hash prefix a range on it, and a listing's `seq > ?` is written `+seq > ?` beside a hash
(SQLite would otherwise walk the rowid from the cursor, scanning the table for one prompt: 1.2 s a read at 10^6).
`tests/service/catalog/versions/test_query_plans.py` reads each statement's plan on both engines."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Literal

from schemas.api import ListedKey
from schemas.checks_api import StoreTally
from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from schemas.states import SUSPECT_AUDITS, Integrity
from service.catalog.schema.dialect import Dialect
from service.catalog.versions.filters import filter_clause
from service.catalog.versions.manifest_rows import (
    TALLY,
    TALLY_COUNTS,
    Attention,
    VersionRow,
    attention_of,
    body_of,
    content_bytes,
    content_text,
    count_into,
    mark_delta,
    prompt_bytes,
    sample_of,
    tally_of,
    unchecked,
)
from service.catalog.versions.records import StoredKey
from service.catalog.versions.references import References
from service.catalog.versions.sampling import draw

_ROW = (
    "SELECT v.seq, v.prompt_hash, v.space, v.content_hash, v.fingerprint, v.created_at, v.body, v.audit, v.integrity,"
    " s.sample FROM entry_versions v JOIN samples s ON s.prompt_hash = v.prompt_hash"
)
_KEY = "v.prompt_hash = ? AND v.space = ? AND v.content_hash = ?"
# a prompt's sample, written once (the migration that moved the first schema's rows in writes it alike)
INSERT_SAMPLE = "INSERT INTO samples (prompt_hash, sample) VALUES (?, ?) ON CONFLICT DO NOTHING"
# an old prompt hash's alias, recorded once (the migration's re-keying and the rebuild's both record it)
RECORD_MOVE = "INSERT INTO prompt_aliases (old_hash, prompt_hash) VALUES (?, ?) ON CONFLICT DO NOTHING"


class SqlVersionCatalog(Dialect, ABC):
    """The statements of every engine's catalog but the insert, whose "added or already there" each says its way.
    What rows reference (key spaces, fingerprints) is `References`'."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.refs = References(db, self._sql)

    @abstractmethod
    def _insert(self, conn: Any, values: tuple) -> bool:
        """Insert the `entry_versions` row (its columns but seq, in table order from prompt_hash to body) unless
        its key is there; whether it was added."""

    @abstractmethod
    def _insert_many(self, conn: Any, rows: list[tuple]) -> list[bool]:
        """`_insert` for each row, in as few round trips as the engine allows; whether each was added."""

    @abstractmethod
    def _many(self, conn: Any, statement: str, rows: list[tuple]) -> None:
        """One statement over many rows."""

    # -- what rows reference ---------------------------------------------------------------------------------------
    def _manifests(self, rows: Iterable[tuple]) -> list[Manifest]:
        read = [VersionRow(*row) for row in rows]
        return [row.manifest(self.refs.space(row.space), self.refs.fingerprint(row.fingerprint)) for row in read]

    # -- the protocol ------------------------------------------------------------------------------------------------
    def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        space, fingerprint = self.refs.space_id(manifest), self.refs.fingerprint_id(manifest)
        prompt, content = prompt_bytes(manifest.prompt_hash), content_bytes(manifest.content_hash)
        attention = attention_of(manifest)
        with self.db.transaction() as conn:
            conn.execute(self._sql(INSERT_SAMPLE), (prompt, sample_of(manifest)))
            values = (prompt, space, content, fingerprint, manifest.num_tokens, manifest.created_at, int(attention))
            added = self._insert(conn, (*values, body_of(manifest)))
            if added:
                conn.execute(self._sql(TALLY), (space, *tally_of(manifest)))
            row = conn.execute(self._sql(f"{_ROW} WHERE {_KEY}"), (prompt, space, content)).fetchone()
        return self._manifests([row])[0], added

    def add_many(self, manifests: Iterable[Manifest], batch: int = 5_000) -> int:
        """Versions added a batch to a transaction (a rebuild of 10^7 documents, a benchmark's store grown): what
        `add` does for each, but for reading each one back. How many were new."""
        added, pending = 0, iter(manifests)
        while chunk := list(itertools.islice(pending, batch)):
            spaces = [self.refs.space_id(m) for m in chunk]
            rows = [
                (
                    prompt_bytes(m.prompt_hash),
                    space,
                    content_bytes(m.content_hash),
                    self.refs.fingerprint_id(m),
                    m.num_tokens,
                    m.created_at,
                    int(attention_of(m)),
                    body_of(m),
                )
                for m, space in zip(chunk, spaces, strict=True)
            ]
            tallies: dict[int, list[int]] = {}
            with self.db.transaction() as conn:
                samples = [(row[0], sample_of(m)) for row, m in zip(rows, chunk, strict=True)]
                self._many(conn, self._sql(INSERT_SAMPLE), samples)
                for new, manifest, space in zip(self._insert_many(conn, rows), chunk, spaces, strict=True):
                    if new:
                        count_into(tallies, space, manifest)
                        added += 1
                for space, counts in tallies.items():  # one upsert a key space a batch
                    conn.execute(self._sql(TALLY), (space, *counts))
        return added

    def versions(self, key: EntryKey) -> list[Manifest]:
        if (space := self.refs.key_space(key)) is None:
            return []
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(f"{_ROW} WHERE v.prompt_hash = ? AND v.space = ?"), (prompt_bytes(key.prompt_hash), space)
            ).fetchall()
        return sorted(self._manifests(rows), key=lambda m: -(m.seq or 0))

    def find(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        return self._manifests(self._select(_ROW, where, limit, after_seq))

    def find_documents(self, where: EntryFilter, limit: int = 100, after_seq: int = 0) -> list[tuple[int, str]]:
        """As `find`, each version's seq and manifest JSON as its row's parts make it, no model built (a listing's
        page, sent as it is: the manifests' validation is the client's, on receipt)."""
        read = [VersionRow(*row) for row in self._select(_ROW, where, limit, after_seq)]
        return [
            (row.seq, row.document(self.refs.space(row.space), self.refs.fingerprint(row.fingerprint))) for row in read
        ]

    def find_keys(self, where: EntryFilter, limit: int = 10_000, after_seq: int = 0) -> list[StoredKey]:
        """As `find`, without reading a manifest: what a snapshot, a sample of versions or a count needs."""
        rows = self._select(
            "SELECT v.seq, v.prompt_hash, v.space, v.content_hash, v.num_tokens, v.created_at FROM entry_versions v",
            where,
            limit,
            after_seq,
        )
        found = []
        for seq, prompt, space, content, tokens, created_at in rows:
            parts = self.refs.space(space)
            listed = ListedKey(
                bytes(prompt).hex(),
                content_text(content),
                parts.model_revision,
                parts.backend,
                parts.featureset_id,
                int(tokens),
                created_at,
            )
            found.append(StoredKey(int(seq), listed))
        return found

    def _select(self, select: str, where: EntryFilter, limit: int, after_seq: int) -> list[tuple]:
        """`select`'s rows (seq first) that `where` admits after `after_seq`, the first `limit` in seq order. Key
        spaces are read one at a time, each in seq order from its (space, seq) index, and merged: an IN list would
        have SQLite sort every version of them to return the first few."""
        spaces = self.refs.matching(where)
        if spaces is not None and not spaces:
            return []
        hashed = where.prompt_hash is not None or where.content_hash is not None
        rows: list[tuple] = []
        with self.db.connection() as conn:
            for one in [spaces] if spaces is None or hashed else [[space] for space in spaces]:
                text, params = filter_clause(where, one, hashed, after_seq)
                # beside a hash, the few rows it names are sorted: ordered by the seq's index, a LIMIT would walk it
                order = "+v.seq" if hashed else "v.seq"
                statement = self._sql(f"{select} WHERE {text} ORDER BY {order} LIMIT ?")
                rows.extend(conn.execute(statement, (*params, limit)).fetchall())
        return sorted(rows, key=lambda row: row[0])[:limit]

    def set_audit(self, key: EntryKey, content_hash: str, record: AuditRecord) -> None:
        if (space := self.refs.key_space(key)) is None:
            return
        match = (prompt_bytes(key.prompt_hash), space, content_bytes(content_hash))
        suspect = record.status in SUSPECT_AUDITS
        self._mark(_KEY, match, "audit", record.model_dump_json(), Attention.SUSPECT, suspect)

    def set_integrity(self, content_hash: str, record: IntegrityRecord | None) -> None:
        damaged = record is not None and record.status == Integrity.CORRUPT
        document = record.model_dump_json() if record is not None else None
        self._mark(
            "v.content_hash = ?", (content_bytes(content_hash),), "integrity", document, Attention.DAMAGED, damaged
        )

    def _mark(
        self,
        match: str,
        params: tuple,
        column: Literal["audit", "integrity"],
        value: str | None,
        bit: Attention,
        on: bool,
    ) -> None:
        """Set a record column of the matching versions and their attention bit, the tallies moved alike."""
        other = "integrity" if column == "audit" else "audit"
        with self.db.transaction() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT v.seq, v.space, v.attention, v.{column}, v.{other} FROM entry_versions v WHERE {match}"
                ),
                params,
            ).fetchall()
            for seq, space, attention, mine, theirs in rows:
                before = Attention(attention)
                after = (before | bit) if on else (before & ~bit)
                conn.execute(
                    self._sql(f"UPDATE entry_versions SET {column} = ?, attention = ? WHERE seq = ?"),
                    (value, int(after), seq),
                )
                was, now = unchecked(mine, theirs), unchecked(value, theirs)
                if after != before or was != now:
                    conn.execute(self._sql(TALLY), mark_delta(int(space), before, after, was, now))

    def sample(
        self, where: EntryFilter, count: int, seed: int | None = None, accept: Callable[[Manifest], bool] | None = None
    ) -> list[Manifest]:
        """Up to `count` versions drawn at random from the key spaces `where` names (its other parts are not read),
        each weighted by its tally (sampling.py): a sample of 10^7 costs what one of 10^3 does."""
        spaces = self.refs.matching(where)
        with self.db.connection() as conn:
            counted = conn.execute("SELECT space, entries FROM tallies WHERE entries > 0").fetchall()
        weights = {int(s): int(entries) for s, entries in counted if spaces is None or int(s) in spaces}
        if not weights or count <= 0:
            return []
        bounds: dict[int, tuple[int, int]] = {}
        with self.db.connection() as conn:
            for space in weights:
                low, high = conn.execute(
                    self._sql("SELECT MIN(seq), MAX(seq) FROM entry_versions WHERE space = ?"), (space,)
                ).fetchone()
                bounds[space] = (int(low), int(high))

        def at_or_after(space: int, seq: int) -> tuple[int, tuple] | None:
            with self.db.connection() as conn:
                row = conn.execute(
                    self._sql(f"{_ROW} WHERE v.space = ? AND v.seq >= ? ORDER BY v.seq LIMIT 1"), (space, seq)
                ).fetchone()
            return None if row is None else (int(row[0]), row)

        return draw(weights, bounds, count, at_or_after, lambda row: self._manifests([row])[0], seed, accept)

    def needing_attention(self, limit: int = 100, after_seq: int = 0) -> list[Manifest]:
        """Versions flagged, damaged or suspect, oldest first: read through the partial index of those alone."""
        with self.db.connection() as conn:
            rows = conn.execute(
                self._sql(f"{_ROW} WHERE v.attention <> 0 AND +v.seq > ? ORDER BY v.seq LIMIT ?"), (after_seq, limit)
            ).fetchall()
        return self._manifests(rows)

    def tallies(self) -> list[StoreTally]:
        with self.db.connection() as conn:
            rows = conn.execute(f"SELECT space, {', '.join(TALLY_COUNTS)} FROM tallies ORDER BY space").fetchall()
        return [self._tally(int(space), counts) for space, *counts in rows]

    def _tally(self, space: int, counts: list) -> StoreTally:
        parts = self.refs.space(space)
        return StoreTally(
            model_revision=parts.model_revision,
            backend=parts.backend,
            featureset_id=parts.featureset_id,
            **{name: int(count) for name, count in zip(TALLY_COUNTS, counts, strict=True)},
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
            return int(conn.execute("SELECT COALESCE(SUM(entries), 0) FROM tallies").fetchone()[0])

    def ping(self) -> None:
        self.db.ping()
