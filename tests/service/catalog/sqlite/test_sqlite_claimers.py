"""Several worker processes claiming from one SQLite catalog: each item is finished once, and none of them fails
with `database is locked` (write transactions take SQLite's lock first and wait for it)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from schemas.states import ItemState, JobState
from service.catalog import SqliteDatabase, SqliteJobStore
from service.catalog.jobs.records import JobRecord, NewItem

ITEMS = 400


def _work(path: str, worker: str) -> int:
    jobs = SqliteJobStore(SqliteDatabase(Path(path)))
    finished = 0
    while claimed := jobs.claim_items("j", worker, 4, lease_s=60):
        for item in claimed:
            finished += jobs.finish_item(item, ItemState.DONE, "sha256:" + "0" * 64, worker=worker)
    return finished


def test_eight_claiming_processes_share_one_sqlite_catalog(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    jobs = SqliteJobStore(SqliteDatabase(path))
    job = JobRecord(
        "j", JobState.QUEUED, 0, False, ["torch"], {"layers": [1]}, None, "2026-12-05T00:00:00Z", None, None, 0, 0.0
    )
    jobs.create_job(job, (NewItem(i, "torch", {"text": str(i)}, f"{i:064x}", None) for i in range(ITEMS)))
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        finished = pool.starmap(_work, [(str(path), f"w{n}") for n in range(8)])  # an error would surface here
    assert sum(finished) == ITEMS
    assert jobs.job_counts("j") == {"pending": 0, "done": ITEMS, "failed": 0, "completions_fetched": 0}
