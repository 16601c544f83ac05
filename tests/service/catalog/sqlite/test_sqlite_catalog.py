"""SQLite passes the shipped contract suites, each part on one shared database file, and a catalog made before schema
versions is brought up to date."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.catalog import SqliteDatabase, SqliteJobStore, SqliteKeyValue, SqliteVersionCatalog, VersionCatalog
from service.catalog.jobs_testing import JobStoreTests
from service.catalog.schema.migrations import TABLE
from service.catalog.sqlite import versions as sqlite_versions
from service.catalog.testing import KeyValueTests, VersionCatalogTests, manifest


@pytest.fixture
def database(tmp_path: Path) -> Iterator[SqliteDatabase]:
    db = SqliteDatabase(tmp_path / "catalog.sqlite")
    yield db
    db.close()


class TestSqliteVersions(VersionCatalogTests):
    @pytest.fixture
    def open_versions(self, tmp_path: Path) -> Iterator[Callable[[], VersionCatalog]]:
        opened: list[SqliteDatabase] = []

        def open_() -> VersionCatalog:
            opened.append(SqliteDatabase(tmp_path / "catalog.sqlite"))
            return SqliteVersionCatalog(opened[-1])

        yield open_
        for db in opened:
            db.close()


class TestSqliteJobs(JobStoreTests):
    @pytest.fixture
    def jobs(self, database: SqliteDatabase) -> SqliteJobStore:
        return SqliteJobStore(database)


class TestSqliteKeyValue(KeyValueTests):
    @pytest.fixture
    def kv(self, database: SqliteDatabase) -> SqliteKeyValue:
        return SqliteKeyValue(database)


def test_a_sqlite_catalog_from_before_migrations_is_brought_up_to_date(tmp_path: Path) -> None:
    """A catalog made before schema versions (no `hsstore_schema`, no audit/integrity columns) opens and migrates,
    its version carried into the normalized tables."""
    import sqlite3

    from service.catalog.upgrades.rekey import v1_document

    path = tmp_path / "catalog.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE versions (seq INTEGER PRIMARY KEY AUTOINCREMENT, prompt_hash TEXT NOT NULL, model_revision TEXT"
        " NOT NULL, backend TEXT NOT NULL, featureset_id TEXT NOT NULL, content_hash TEXT NOT NULL, created_at TEXT"
        " NOT NULL, manifest TEXT NOT NULL, UNIQUE (prompt_hash, model_revision, backend, featureset_id,"
        " content_hash));"
    )
    kept = manifest()
    old.execute(
        "INSERT INTO versions VALUES (7, ?, ?, ?, ?, ?, ?, ?)",
        (
            *(getattr(kept, c) for c in ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash")),
            kept.created_at,
            v1_document(kept),
        ),
    )
    old.commit()
    old.close()
    db = SqliteDatabase(path)
    versions = SqliteVersionCatalog(db)
    with db.connection() as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "versions" not in tables and {"entry_versions", "key_spaces", "samples", "tallies"} <= tables
        assert conn.execute(f"SELECT version FROM {TABLE} WHERE part = 'versions'").fetchone()[0] == len(
            sqlite_versions.MIGRATIONS
        )
    assert versions.count() == 1
    assert versions.versions(kept.key) == [kept.model_copy(update={"seq": 7})]
    assert versions.add(manifest(content="2"))[0].seq == 8  # numbering goes on after the carried version
    db.close()
