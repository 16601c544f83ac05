"""Schema versions for every catalog engine: each part of a catalog (versions, jobs, kv) is an ordered list of
steps, and a table `hsstore_schema (part, version)` says how many of them a database has had. Opening a catalog
applies the missing steps in order, each in the transaction that records it, under the engine's lock for schema
changes (Postgres: an advisory lock, so replicas and workers starting together migrate once; SQLite: its write
lock). A database newer than this code is refused, never written to.

Why not Alembic: the catalog is a handful of tables written in plain SQL per engine, with no ORM; Alembic would bring
SQLAlchemy for the DDL alone. What it would give — ordered, recorded, transactional steps, taken once under a lock
— is this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# A step is SQL (statements separated by `;`) or a function given the open connection.
Step = str | Callable[[Any], None]

TABLE = "hsstore_schema"


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer hsstore than this one."""


@dataclass(frozen=True, slots=True)
class PartSchema:
    """How far one part of a database is against this code's steps: what `hsstore migrate` reports."""

    part: str
    have: int
    steps: int

    @property
    def state(self) -> Literal["current", "behind", "newer"]:
        return "current" if self.have == self.steps else "behind" if self.have < self.steps else "newer"


def check_version(part: str, have: int, steps: Sequence[Step]) -> None:
    if have > len(steps):
        raise SchemaTooNew(
            f"the catalog's {part} schema is version {have}, newer than this hsstore knows ({len(steps)}): upgrade it"
        )


def statements(step: str) -> list[str]:
    return [s.strip() for s in step.split(";") if s.strip()]


def migrate_part(conn: Any, part: str, steps: Sequence[Step], mark: str) -> None:
    """Inside the caller's transaction and lock: the part's missing steps, each recorded as it is applied. `mark` is
    the engine's placeholder (`?` for SQLite, `%s` for Postgres); `conn` any DB-API connection with `execute`."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (part TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    row = conn.execute(f"SELECT version FROM {TABLE} WHERE part = {mark}", (part,)).fetchone()
    have = row[0] if row else 0
    check_version(part, have, steps)
    for version, step in enumerate(steps[have:], start=have + 1):
        if callable(step):
            step(conn)
        else:
            for statement in statements(step):
                conn.execute(statement)
        conn.execute(
            f"INSERT INTO {TABLE} (part, version) VALUES ({mark}, {mark})"
            " ON CONFLICT (part) DO UPDATE SET version = excluded.version",
            (part, version),
        )
