"""Postgres passes the shipped contract suites on a throwaway database of the machine's real server, and replicas and
workers starting together migrate its schema once, recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from service.catalog import VersionCatalog
from service.catalog.jobs_testing import JobStoreTests
from service.catalog.postgres import PostgresDatabase, PostgresJobStore, PostgresKeyValue, PostgresVersionCatalog
from service.catalog.postgres import jobs as postgres_jobs
from service.catalog.postgres import kv as postgres_kv
from service.catalog.postgres import versions as postgres_versions
from service.catalog.schema.migrations import TABLE
from service.catalog.testing import KeyValueTests, VersionCatalogTests


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
