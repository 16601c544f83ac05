"""The SQLite catalog passes the shipped contract suites, each part on one shared database file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.catalog import SqliteDatabase, SqliteJobStore, SqliteKeyValue, SqliteVersionCatalog, VersionCatalog
from service.catalog.testing import JobStoreTests, KeyValueTests, VersionCatalogTests


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
