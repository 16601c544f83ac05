"""One SQLite file and one connection, shared by the catalog's parts: each part brings its own tables."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from service.catalog.schema.migrations import TABLE, Step, check_version, migrate_part
from service.errors import ReadOnly

log = logging.getLogger("hsstore.catalog")


class SqliteDatabase:
    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.Lock()
        if read_only:
            self._db = self._open_read_only()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the server's worker threads, serialised by a lock; WAL lets readers in other
        # processes (the CLI, a second replica) read while we write.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")

    def _open_read_only(self) -> sqlite3.Connection:
        """A WAL database opens read-only where its -shm file exists or can be made; on a read-only volume without
        one, only as immutable (no locks: right for a volume nobody writes through this mount)."""
        if not self.path.is_file():
            raise ReadOnly(f"a read-only replica needs an existing catalog, and {self.path.name} is missing")
        for mode in ("ro", "ro&immutable=1"):
            db = sqlite3.connect(
                f"file:{self.path}?mode={mode}", uri=True, check_same_thread=False, isolation_level=None, timeout=30
            )
            try:
                db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError as exc:
                db.close()
                log.warning("catalog read-only (%s) failed: %s", mode, exc)
                continue
            return db
        raise ReadOnly(f"the catalog {self.path.name} cannot be opened read-only")

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection for reading, held by this thread alone until the block ends."""
        with self._lock:
            yield self._db

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """The connection for a write; ReadOnly on a read-only replica."""
        self._refuse_if_read_only()
        with self._lock:
            yield self._db

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise ReadOnly(
                "this replica serves a read-only store: it writes nothing (write through the host that owns it)"
            )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All of the block's statements, or none of them."""
        self._refuse_if_read_only()
        with self._lock:
            # IMMEDIATE: the write lock first, waited for within the busy timeout; a deferred BEGIN that reads and
            # then writes fails at once ("database is locked") when another process is writing
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def migrate(self, part: str, steps: Sequence[Step]) -> None:
        """Bring a part's tables to the newest version (`schema/migrations.py`); a read-only replica only
        checks that it can read what it finds."""
        if self.read_only:
            check_version(part, self.schema_version(part), steps)
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # the write lock: one process migrates, the others then find it done
            try:
                migrate_part(self._db, part, steps, "?")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def schema_version(self, part: str) -> int:
        """How many of a part's steps this database has had (0: none yet)."""
        with self._lock:
            if not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone():
                return 0
            row = self._db.execute(f"SELECT version FROM {TABLE} WHERE part = ?", (part,)).fetchone()
        return row[0] if row else 0

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
