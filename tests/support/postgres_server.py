"""A real Postgres for tests: the machine's packaged cluster (started by `scripts/postgres-for-tests.sh`, which
`make test` runs), a throwaway database per test. Never skipped: without Postgres the tests fail, naming why.

The suite's processes (pytest-xdist's workers) share that one server: a test holds it shared while it uses it, and a
test that stops it holds it alone (`postgres_held`), so no other test meets the outage it causes."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ADMIN_URL = os.environ.get("HSSTORE_TEST_POSTGRES", "postgresql://hsstore:hsstore@127.0.0.1:5432/postgres")
LOCK = Path(tempfile.gettempdir()) / "hsstore-tests-postgres.lock"  # one per machine, as the server is


@contextlib.contextmanager
def postgres_held(alone: bool = False) -> Iterator[None]:
    """The machine's Postgres held against the suite's other processes, shared or alone (a reader-writer lock: a
    process holds it one way at a time, so a test that holds it alone never also holds it shared)."""
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        yield  # closing the file lets it go


def _reachable() -> bool:
    import psycopg  # here, not at import: the GPU machine runs tests without psycopg

    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def postgres_admin() -> str:
    with postgres_held():  # never while a test has stopped it on purpose
        if not _reachable():
            subprocess.run([str(REPO / "scripts" / "postgres-for-tests.sh")], check=False)
        if not _reachable():
            pytest.fail(f"no Postgres at {ADMIN_URL}: run scripts/postgres-for-tests.sh (make test does)")
    return ADMIN_URL


@pytest.fixture
def postgres_url(postgres_admin: str) -> Iterator[str]:
    with postgres_held(), throwaway_database(postgres_admin) as url:
        yield url


@contextlib.contextmanager
def throwaway_database(postgres_admin: str) -> Iterator[str]:
    import psycopg

    name = f"hsstore_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_admin.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_admin, autocommit=True) as conn:
        # Not WITH (FORCE): Postgres 15 refuses that to a plain role while an autovacuum worker (of no role) is in
        # the database. Ending our own leftover sessions first, a plain DROP stops the autovacuum worker itself. A
        # process the test left running can connect again between the two (its pool reconnects): end them again.
        for attempt in itertools.count():
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND usename = current_user AND pid <> pg_backend_pid()",
                [name],
            )
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                return
            except psycopg.errors.ObjectInUse:
                if attempt == 50:
                    raise
                time.sleep(0.1)
