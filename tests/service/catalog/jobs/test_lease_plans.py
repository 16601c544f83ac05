"""The lease statements read the few items under a lease through their own index on both engines, never the table:
the heartbeat renews a worker's leases, and `hsstore workers` and every /metrics scrape list live and lapsed leases,
while a job holds 20,000 items (its plan read as test_query_plans.py reads the versions')."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.states import ItemState
from service.catalog import SqliteDatabase, SqliteJobStore
from service.catalog.jobs.records import NewItem
from service.catalog.jobs.rows import LAPSED_LEASES, LIVE_LEASES, RENEW_LEASES, SqlJobStore
from service.catalog.jobs_testing import job_record
from service.catalog.postgres import PostgresDatabase, PostgresJobStore
from tests.service.catalog.versions.test_query_plans import _plan

ITEMS = 20_000


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, SqlJobStore]]:
    db: Any
    store: SqlJobStore
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "catalog.sqlite")
        store = SqliteJobStore(db)
    else:
        db = PostgresDatabase(request.getfixturevalue("postgres_url"))
        store = PostgresJobStore(db)
    items = (NewItem(i, "torch", {"text": str(i)}, f"{i:064d}", None) for i in range(ITEMS))
    store.create_job(job_record("j", 0, "2026-12-05T00:00:00Z"), items)
    store.claim_items("j", "w1", 3, lease_s=60)
    with db.writing() as conn:
        conn.execute("ANALYZE")
    yield request.param, store
    db.close()


def test_lease_statements_read_the_leased_items_alone(engine: tuple[str, SqlJobStore]) -> None:
    name, store = engine
    statements = {
        "live leases": (LIVE_LEASES, (ItemState.PENDING,)),
        "lapsed leases": (LAPSED_LEASES, (ItemState.PENDING,)),
        "a heartbeat": (RENEW_LEASES, (60.0, "w1", ItemState.PENDING)),
    }
    for what, (statement, params) in statements.items():
        plan = _plan(name, store.db, store._sql(statement), params)
        assert "job_items_leased" in plan, (what, plan)
        scans = [line for line in plan.splitlines() if "SCAN job_items" in line or "Seq Scan job_items" in line]
        assert not [line for line in scans if "job_items_leased" not in line], (what, plan)
    assert [lease.items for lease in store.live_leases()] == [3]
