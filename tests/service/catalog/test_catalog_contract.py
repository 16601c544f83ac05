"""Every catalog engine passes the shipped contract suites: SQLite (each part on one shared database file) and
Postgres (a throwaway database of the real server); and both migrate their schema once, recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.catalog import SqliteDatabase, SqliteJobStore, SqliteKeyValue, SqliteVersionCatalog, VersionCatalog
from service.catalog.jobs_testing import JobStoreTests
from service.catalog.migrations import TABLE, SchemaTooNew
from service.catalog.postgres import PostgresDatabase, PostgresJobStore, PostgresKeyValue, PostgresVersionCatalog
from service.catalog.postgres import jobs as postgres_jobs
from service.catalog.postgres import kv as postgres_kv
from service.catalog.postgres import versions as postgres_versions
from service.catalog.sqlite import jobs as sqlite_jobs
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


@pytest.fixture
def pg_database(postgres_url: str) -> Iterator[PostgresDatabase]:
    db = PostgresDatabase(postgres_url)
    yield db
    db.close()


class TestPostgresVersions(VersionCatalogTests):
    @pytest.fixture
    def open_versions(self, postgres_url: str) -> Iterator[Callable[[], VersionCatalog]]:
        opened: list[PostgresDatabase] = []

        def open_() -> VersionCatalog:
            opened.append(PostgresDatabase(postgres_url))
            return PostgresVersionCatalog(opened[-1])

        yield open_
        for db in opened:
            db.close()


class TestPostgresJobs(JobStoreTests):
    @pytest.fixture
    def jobs(self, pg_database: PostgresDatabase) -> PostgresJobStore:
        return PostgresJobStore(pg_database)


class TestPostgresKeyValue(KeyValueTests):
    @pytest.fixture
    def kv(self, pg_database: PostgresDatabase) -> PostgresKeyValue:
        return PostgresKeyValue(pg_database)


def test_postgres_schema_is_migrated_once_and_recorded(postgres_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def start() -> None:  # replicas and workers starting together
        db = PostgresDatabase(postgres_url)
        PostgresVersionCatalog(db), PostgresJobStore(db), PostgresKeyValue(db)
        db.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: start(), range(4)))
    db = PostgresDatabase(postgres_url)
    with db.connection() as conn:
        recorded = dict(conn.execute(f"SELECT part, version FROM {TABLE}").fetchall())
    assert recorded == {
        "versions": len(postgres_versions.MIGRATIONS),
        "jobs": len(postgres_jobs.MIGRATIONS),
        "kv": len(postgres_kv.MIGRATIONS),
    }
    db.close()


def test_a_newer_schema_is_refused(postgres_url: str, tmp_path: Path) -> None:
    db = PostgresDatabase(postgres_url)
    PostgresKeyValue(db)
    with db.connection() as conn:
        conn.execute(f"UPDATE {TABLE} SET version = 99 WHERE part = 'kv'")
    with pytest.raises(SchemaTooNew):
        PostgresKeyValue(db)
    db.close()
    sqlite = SqliteDatabase(tmp_path / "catalog.sqlite")
    SqliteKeyValue(sqlite)
    with sqlite.writing() as conn:
        conn.execute(f"UPDATE {TABLE} SET version = 99 WHERE part = 'kv'")
    with pytest.raises(SchemaTooNew):
        SqliteKeyValue(sqlite)


def test_a_sqlite_catalog_from_before_migrations_is_brought_up_to_date(tmp_path: Path) -> None:
    """A catalog made before schema versions (no `hsstore_schema`, no audit/integrity columns) opens and migrates,
    its version carried into the normalized tables."""
    import sqlite3

    from service.catalog.rekey import v1_document

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


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_env(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, str], Callable[[], Any]]:
    """The environment `hsstore migrate` is given for one engine, and how to open that engine's database."""
    if request.param == "sqlite":
        return {"HSSTORE_DATA_DIR": str(tmp_path)}, lambda: SqliteDatabase(tmp_path / "catalog.sqlite")
    url = request.getfixturevalue("postgres_url")
    return {"HSSTORE_DATA_DIR": str(tmp_path), "HSSTORE_CATALOG_URL": url}, lambda: PostgresDatabase(url)


def test_hsstore_migrate_reports_applies_and_refuses_a_newer_schema(
    catalog_env: tuple[dict[str, str], Callable[[], Any]],
) -> None:
    from typer.testing import CliRunner

    from hsstore.cli import app

    env, open_database = catalog_env
    db = open_database()
    engine = sqlite_jobs if isinstance(db, SqliteDatabase) else postgres_jobs
    db.migrate("jobs", engine.MIGRATIONS[:-1])  # an older hsstore's jobs schema
    db.close()
    runner = CliRunner()
    check = runner.invoke(app, ["migrate", "--check"], env=env)
    assert (
        check.exit_code == 1 and f"jobs      {len(engine.MIGRATIONS) - 1} of {len(engine.MIGRATIONS)}" in check.output
    )
    assert "versions  0 of " in check.output and check.output.count("behind") == 3
    done = runner.invoke(app, ["migrate"], env=env)
    assert done.exit_code == 0 and done.output.count("current") == 3, done.output
    assert runner.invoke(app, ["migrate", "--check"], env=env).exit_code == 0
    db = open_database()
    with db.transaction() as conn:  # a newer hsstore migrated it since
        conn.execute(f"UPDATE {TABLE} SET version = version + 1 WHERE part = 'kv'")
    db.close()
    newer = runner.invoke(app, ["migrate"], env=env)
    assert newer.exit_code == 1 and "kv        2 of 1 steps  newer" in newer.output, newer.output
    assert "migrated by a newer hsstore than this one" in newer.output


def test_hsstore_migrate_takes_the_store_directory_and_names_the_catalog_it_read(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hsstore.cli import app

    runner = CliRunner()
    missing = runner.invoke(app, ["migrate", "--check", "--data-dir", str(tmp_path / "none")])
    assert missing.exit_code == 1 and f"no catalog yet at {tmp_path / 'none' / 'catalog.sqlite'}" in missing.output
    made = runner.invoke(app, ["migrate", "--data-dir", str(tmp_path / "store")])
    assert made.exit_code == 0 and f"catalog {tmp_path / 'store' / 'catalog.sqlite'}" in made.output, made.output
    checked = runner.invoke(app, ["migrate", "--check", "--data-dir", str(tmp_path / "store")])
    assert checked.exit_code == 0 and checked.output.count("current") == 3, checked.output
