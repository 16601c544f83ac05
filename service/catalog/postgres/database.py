"""A Postgres database shared by the catalog's parts: a pool of connections (psycopg 3), each part bringing its own
tables through the migrations. Every replica and worker of a cluster opens the same database."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool

from service.catalog.migrations import TABLE, Step, check_version, migrate_part
from service.errors import ReadOnly
from service.settings import ConfigError

log = logging.getLogger("hsstore.catalog")
_MIGRATION_LOCK = 0x68737374  # one advisory lock id for every hsstore schema change ("hsst")


def masked(url: str) -> str:
    """The URL with its password hidden (for messages and logs)."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    return f"{scheme}://{credentials.split(':')[0]}:***@{host}" if at else url


class PostgresDatabase:
    def __init__(self, url: str, read_only: bool = False, max_connections: int = 8) -> None:
        self.url = url
        self.read_only = read_only
        try:  # once, directly: a wrong URL or a down server is said now, in one line, not as a pool timing out
            psycopg.connect(url, connect_timeout=10).close()
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"the catalog at {masked(url)} cannot be reached: {reason} (catalog_url)") from None
        self.pool = ConnectionPool(url, min_size=1, max_size=max_connections, open=True, kwargs={"autocommit": True})
        self.pool.wait(timeout=30)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection for reading (each statement its own transaction)."""
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def writing(self) -> Iterator[psycopg.Connection]:
        self._refuse_if_read_only()
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """All of the block's statements, or none of them."""
        self._refuse_if_read_only()
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise ReadOnly("this replica serves the catalog read-only: it writes nothing")

    def migrate(self, part: str, steps: Sequence[Step]) -> None:
        """Bring a part's tables to the newest version, once, whoever else is starting at the same moment."""
        if self.read_only:
            check_version(part, self.schema_version(part), steps)
            return
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            migrate_part(conn, part, steps, "%s")

    def schema_version(self, part: str) -> int:
        """How many of a part's steps this database has had (0: none yet)."""
        with self.pool.connection() as conn:
            if not conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0]:
                return 0
            row = conn.execute(f"SELECT version FROM {TABLE} WHERE part = %s", (part,)).fetchone()
        return row[0] if row else 0

    def ping(self) -> None:
        with self.pool.connection() as conn:
            conn.execute("SELECT 1").fetchone()

    def close(self) -> None:
        self.pool.close()
