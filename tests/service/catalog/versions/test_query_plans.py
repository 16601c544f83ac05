"""Every statement the catalog runs for a request that names a key, and for the writer's own checks, reads through an
index on both engines: its plan is read (SQLite's EXPLAIN QUERY PLAN, Postgres' EXPLAIN on an analyzed table of
20,000 versions) and a scan of the versions, or a walk of them in seq order from a cursor, fails the test. So a read
costs what it costs at 10^4 versions at 10^7 (benchmarks/scale.py measures it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from schemas.keys import EntryFilter, FeatureKey
from schemas.manifest import AuditRecord, IntegrityRecord, Manifest
from schemas.states import AuditStatus, Integrity
from service.catalog import SqliteDatabase, SqliteVersionCatalog
from service.catalog.postgres import PostgresDatabase, PostgresVersionCatalog
from service.catalog.testing import manifest
from service.catalog.versions.manifest_rows import body_of
from service.catalog.versions.rows import SqlVersionCatalog

ROWS = 20_000
SPACES = ("torch", "fla", "unknown")


class Recording:
    """The catalog's database, recording every statement its connections run."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.statements: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def _recorded(self, opened: Any) -> Any:
        recording = self

        @contextmanager
        def wrapped() -> Iterator[Any]:
            with opened() as conn:

                class Conn:
                    def execute(self, statement: str, params: tuple = ()) -> Any:
                        recording.statements.append((statement, tuple(params)))
                        return conn.execute(statement, params)

                yield Conn()

        return wrapped

    def connection(self) -> Any:
        return self._recorded(self.db.connection)()

    def writing(self) -> Any:
        return self._recorded(self.db.writing)()

    def transaction(self) -> Any:
        return self._recorded(self.db.transaction)()


def _fill(versions: SqlVersionCatalog, mark: str, analyzed: bool) -> list[Manifest]:
    """A few versions through the catalog (key spaces, fingerprint, samples), then ROWS more as the same rows, and
    the engine's statistics taken or not (SQLite never takes them unless told; Postgres' autovacuum does, later)."""
    real = [
        versions.add(manifest(prompt=p, backend=b, content=c))[0] for p, b, c in zip("abc", SPACES, "123", strict=True)
    ]
    body, fingerprint = body_of(real[0]), 1
    rows = []
    for i in range(ROWS):
        prompt, content = i.to_bytes(4, "big") * 8, (i + ROWS).to_bytes(4, "big") * 8
        rows.append((prompt, 1 + i % len(SPACES), content, fingerprint, 3, "2026-12-01T00:00:00Z", 0, body))
    place = ", ".join([mark] * 8)
    with versions.db.transaction() as conn:
        many = conn.executemany if hasattr(conn, "executemany") else conn.cursor().executemany
        many(
            "INSERT INTO entry_versions (prompt_hash, space, content_hash, fingerprint, num_tokens, created_at,"
            f" attention, body) VALUES ({place})",
            rows,
        )
        many(
            f"INSERT INTO samples (prompt_hash, sample) VALUES ({mark}, {mark})",
            [(row[0], json.dumps({"text": str(i)})) for i, row in enumerate(rows)],
        )
    if analyzed:
        with versions.db.connection() as conn:
            conn.execute("ANALYZE")
    return real


@pytest.fixture(params=["sqlite", "sqlite analyzed", "postgres", "postgres analyzed"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, SqlVersionCatalog, list[Manifest]]]:
    kind, analyzed = request.param.split(" ")[0], request.param.endswith("analyzed")
    if kind == "sqlite":
        db: Any = SqliteDatabase(tmp_path / "catalog.sqlite")
        versions: SqlVersionCatalog = SqliteVersionCatalog(db)
    else:
        db = PostgresDatabase(request.getfixturevalue("postgres_url"))
        versions = PostgresVersionCatalog(db)
    real = _fill(versions, versions.placeholder, analyzed)
    yield kind, versions, real
    db.close()


def _plan(engine: str, db: Any, statement: str, params: tuple) -> str:
    with db.connection() as conn:
        if engine == "sqlite":
            rows = conn.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
            return "\n".join(str(row[-1]) for row in rows)
        (plan,) = conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params).fetchone()
    nodes, found = [plan[0]["Plan"]], []
    while nodes:
        node = nodes.pop()
        found.append(f"{node['Node Type']} {node.get('Relation Name', '')} {node.get('Index Name', '')}")
        nodes.extend(node.get("Plans", []))
    return "\n".join(found)


# the indexes that serve a statement naming a hash: the key's unique index (prompt hash first) and the content hash's
_HASH_INDEXES = {
    "sqlite": ("sqlite_autoindex_entry_versions_1", "entry_versions_content"),
    "postgres": ("entry_versions_prompt_hash_space_content_hash_key", "entry_versions_content"),
}


def _by_hash(engine: str, plan: str) -> bool:
    """Whether the plan reads the versions through a hash's index (not a key space's, not the table's order)."""
    return any(index in plan for index in _HASH_INDEXES[engine])


def _scans(engine: str, plan: str) -> list[str]:
    """The plan's lines that read the versions without a key: a full scan, or SQLite's walk in seq order (a scan of
    the partial index of the versions needing attention reads those alone)."""
    if engine == "sqlite":
        return [
            line
            for line in plan.splitlines()
            if ("SCAN v" in line or "SCAN entry_versions" in line or "INTEGER PRIMARY KEY (rowid>?)" in line)
            and "USING INDEX entry_versions_attention" not in line
        ]
    return [line for line in plan.splitlines() if line.startswith("Seq Scan entry_versions")]


def test_every_statement_that_names_a_key_reads_through_an_index(
    engine: tuple[str, SqlVersionCatalog, list[Manifest]],
) -> None:
    name, versions, real = engine
    first = real[0]
    recording = Recording(versions.db)
    versions.db = recording
    whole = FeatureKey(
        prompt_hash=first.prompt_hash,
        model_revision=first.model_revision,
        backend=first.backend,
        featureset_id=first.featureset_id,
    )
    operations: dict[str, Callable[[], object]] = {
        "a read's resolution": lambda: versions.find(EntryFilter.of_key(FeatureKey(prompt_hash=first.prompt_hash))),
        "a read naming every key part": lambda: versions.find(EntryFilter.of_key(whole)),
        "a read naming its backend": lambda: versions.find(
            EntryFilter.of_key(FeatureKey(prompt_hash=first.prompt_hash, backend=first.backend))
        ),
        "an entry's versions (the writer's check)": lambda: versions.versions(first.key),
        "a prompt prefix (an id pasted back)": lambda: versions.find(EntryFilter(prompt_hash=first.prompt_hash[:10])),
        "a content hash (the writer's corrupt check)": lambda: versions.find(
            EntryFilter(content_hash=first.content_hash), limit=1
        ),
        "a content prefix": lambda: versions.find_keys(EntryFilter(content_hash=first.content_hash[:15])),
        "a key space's first versions (the content checks' band)": lambda: versions.find(
            EntryFilter(model_revision=first.model_revision, featureset_id=first.featureset_id), limit=64
        ),
        "an audit recorded": lambda: versions.set_audit(
            first.key,
            first.content_hash,
            AuditRecord(status=AuditStatus.REPRODUCED, audited_at="2026-12-01T00:00:00.000000Z"),
        ),
        "an integrity check recorded": lambda: versions.set_integrity(
            first.content_hash, IntegrityRecord(status=Integrity.INTACT, checked_at="2026-12-01T00:00:00.000000Z")
        ),
        "a version added": lambda: versions.add(manifest(prompt="d", content="4")),
        "a random sample": lambda: versions.sample(EntryFilter(backend="fla"), 5, seed=1),
        "what needs attention": lambda: versions.needing_attention(),
    }
    for operation, run in operations.items():
        recording.statements.clear()
        run()
        assert recording.statements, operation
        for statement, params in recording.statements:
            if not statement.lstrip().upper().startswith(("SELECT", "UPDATE")) or "entry_versions" not in statement:
                continue
            plan = _plan(name, recording.db, statement, params)
            assert not _scans(name, plan), (operation, statement, plan)
            if any(
                f"{column} {op}" in statement
                for column in ("v.prompt_hash", "v.content_hash")
                for op in ("= ?", "= %s", ">=")
            ):
                assert _by_hash(name, plan), (operation, statement, plan)
