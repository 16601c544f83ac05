"""Both engines keep their schema's version: a schema migrated by a newer hsstore is refused, and `hsstore migrate`
reports, applies and refuses on either. (Each engine's contract suites: tests/service/catalog/sqlite/ and postgres/.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.catalog import SqliteDatabase, SqliteKeyValue
from service.catalog.postgres import PostgresDatabase, PostgresKeyValue
from service.catalog.postgres import jobs as postgres_jobs
from service.catalog.schema.migrations import TABLE, SchemaTooNew
from service.catalog.sqlite import jobs as sqlite_jobs


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
