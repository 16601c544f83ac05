"""A large job is claimed through its index as soon as it lands: Postgres chooses the claim's plan from its
statistics of job_items, and autovacuum's ANALYZE comes late (benchmarks/scale.py: a fresh job of 10^6 items gave 11
claims a second, seq-scanning it, until then; 745 after). So the store restates them when a large job lands."""

from __future__ import annotations

from schemas.states import JobState
from service.catalog.jobs.records import JobRecord, NewItem
from service.catalog.jobs.rows import _RESTATED_AFTER
from service.catalog.postgres import PostgresDatabase, PostgresJobStore


def _rows_planned(db: PostgresDatabase) -> float:
    with db.connection() as conn:
        return float(conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'job_items'").fetchone()[0])


def test_a_large_job_leaves_the_planner_knowing_its_items(postgres_url: str) -> None:
    db = PostgresDatabase(postgres_url)
    jobs = PostgresJobStore(db)
    with db.writing() as conn:
        conn.execute("ANALYZE job_items")  # statistics of an empty table, as a new store's are
    assert _rows_planned(db) <= 0
    for name, count in (("small", 10), ("large", _RESTATED_AFTER)):
        created = "2026-12-05T00:00:00Z"
        job = JobRecord(name, JobState.QUEUED, 0, False, ["torch"], {"layers": [1]}, None, created, None, None, 0, 0.0)
        jobs.create_job(job, (NewItem(i, "torch", {"text": str(i)}, f"{i:064x}", None) for i in range(count)))
        if name == "small":
            assert _rows_planned(db) <= 0  # a small job changes nothing the planner needs
    assert _rows_planned(db) == _RESTATED_AFTER + 10
    claimed = jobs.claim_items("large", "w", 8, lease_s=60)
    assert [item.index for item in claimed] == list(range(8))
