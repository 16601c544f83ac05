"""One SQLite file and one connection, shared by the catalog's parts: each part brings its own tables."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class SqliteDatabase:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the server's worker threads, serialised by a lock; WAL lets readers in other
        # processes (the CLI, a second replica) read while we write.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, held by this thread alone until the block ends."""
        with self._lock:
            yield self._db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All of the block's statements, or none of them."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def create(self, schema: str) -> None:
        """A part's tables and indexes, if they are not there yet."""
        with self._lock:
            self._db.executescript(schema)

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
