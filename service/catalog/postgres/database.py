"""A Postgres database shared by the catalog's parts: a pool of connections (psycopg 3), each part bringing its own
tables through the migrations. Every replica and worker of a cluster opens the same database."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from service.catalog.schema.migrations import TABLE, Step, check_version, migrate_part
from service.errors import CatalogUnavailable, ConfigError, ReadOnly

log = logging.getLogger("hsstore.catalog")
_MIGRATION_LOCK = 0x68737374  # one advisory lock id for every hsstore schema change ("hsst")
_WAIT_S = 1.0  # for a connection from the pool, before the catalog is called unavailable


@contextmanager
def _answering(url: str) -> Iterator[None]:
    """The database's absence as the outage it is (503 catalog_unavailable), never an internal error."""
    try:
        yield
    except (PoolTimeout, psycopg.OperationalError) as exc:
        raise CatalogUnavailable(
            f"the catalog at {masked(url)} did not answer ({_reason(exc)[:200]}); try again"
        ) from None


def _reason(exc: Exception) -> str:
    """psycopg's error in one line (its messages run to several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
            raise ConfigError(f"the catalog at {masked(url)} cannot be reached: {_reason(exc)} (catalog_url)") from None
        # A connection is checked before it is handed out (one left over from before a restart is replaced, not
        # failed on), and waiting for one is bounded: a database that is down is said within about a second.
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            open=True,
            kwargs={"autocommit": True, "connect_timeout": 2},
            check=ConnectionPool.check_connection,
            timeout=_WAIT_S,
        )
        self.pool.wait(timeout=30)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection for reading (each statement its own transaction)."""
        with _answering(self.url), self._connected() as conn:
            yield conn

    @contextmanager
    def writing(self) -> Iterator[psycopg.Connection]:
        self._refuse_if_read_only()
        with _answering(self.url), self._connected() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """All of the block's statements, or none of them."""
        self._refuse_if_read_only()
        with _answering(self.url), self._connected() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _connected(self) -> Iterator[psycopg.Connection]:
        """A checked connection from the pool; after an outage, while the pool still backs off before reconnecting,
        one made directly if the server answers again (so the first request after a restart succeeds)."""
        try:
            conn, pooled = self.pool.getconn(), True
        except PoolTimeout:
            conn, pooled = psycopg.connect(self.url, autocommit=True, connect_timeout=2), False
        try:
            yield conn
        finally:
            if pooled:
                self.pool.putconn(conn)
            else:
                conn.close()

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
            found = conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()
            if found is None or not found[0]:
                return 0
            row = conn.execute(f"SELECT version FROM {TABLE} WHERE part = %s", (part,)).fetchone()
        return row[0] if row else 0

    def ping(self) -> None:
        # as a request's connection: after a restart, ready as soon as the server answers, not once the pool's
        # back-off lets it reconnect (readiness said 503 for a while after the first request had succeeded)
        with self.connection() as conn:
            conn.execute("SELECT 1").fetchone()

    def close(self) -> None:
        self.pool.close()
