"""The contract suite every JobStore engine passes unchanged (catalog/testing.py says how a suite is used):
`JobStoreTests` = `JobsTests` + `LeasesTests` + `CompletionsTests`, each taking the fixture `jobs`: a JobStore."""

from __future__ import annotations

import time

from schemas.states import ItemState, JobState
from service.catalog.jobs.records import JobRecord, NewItem
from service.catalog.protocol import JobStore


def job_record(id_: str, priority: int, created: str, run_now: bool = False) -> JobRecord:
    """A queued job's record, as a test or a benchmark sets one up."""
    return JobRecord(
        id_, JobState.QUEUED, priority, run_now, ["torch"], {"layers": [1]}, None, created, None, None, 0, 0.0
    )


class JobsTests:
    """`Jobs`: created whole, run by priority then age, their states, errors, work and listing."""

    def test_jobs_run_by_priority_then_age_and_windowed_jobs_wait(self, jobs: JobStore) -> None:
        jobs.create_job(
            job_record("old", 0, "2026-11-30T01:00:00Z"), [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)]
        )
        jobs.create_job(
            job_record("urgent", 5, "2026-11-30T02:00:00Z"), [NewItem(0, "torch", {"text": "b"}, "b" * 64, None)]
        )
        now = job_record("now", -1, "2026-11-30T03:00:00Z", run_now=True)
        jobs.create_job(now, [NewItem(0, "torch", {"text": "c"}, "c" * 64, 4)])
        assert [j.id for j in jobs.runnable_jobs(include_windowed=True)] == ["urgent", "old", "now"]
        assert [j.id for j in jobs.runnable_jobs(include_windowed=False)] == ["now"]
        (item,) = jobs.pending_items("now", 10, needing_completion=True)
        jobs.set_completion("now", 0, [7, 8], "greedy:sglang")
        assert jobs.pending_items("now", 10, needing_completion=True) == []
        jobs.finish_item(item, ItemState.DONE, content_hash="sha256:" + "0" * 64)
        assert jobs.job_counts("now") == {"pending": 0, "done": 1, "failed": 0, "completions_fetched": 1}

    def test_states_errors_and_work(self, jobs: JobStore) -> None:
        items = [NewItem(i, "torch", {"text": str(i)}, str(i) * 64, None) for i in range(3)]
        jobs.create_job(job_record("j", 0, "2026-11-30T01:00:00Z"), items)
        first, second, _ = jobs.pending_items("j", 10)
        jobs.finish_item(first, ItemState.FAILED, error="too long")
        jobs.finish_item(second, ItemState.DONE, content_hash="sha256:" + "1" * 64)
        assert jobs.job_errors("j") == [(0, "torch", "0" * 64, "too long")]
        jobs.set_job_state("j", JobState.RUNNING, started_at="2026-11-30T02:00:00Z")
        jobs.add_job_work("j", 120, 1.5)
        jobs.add_job_work("j", 30, 0.5)
        record = jobs.get_job("j")
        assert record is not None and record.state == JobState.RUNNING
        assert (record.tokens, record.busy_s, record.started_at) == (150, 2.0, "2026-11-30T02:00:00Z")
        assert jobs.job_states() == {**dict.fromkeys(JobState, 0), JobState.RUNNING: 1}
        jobs.set_job_state("j", JobState.DONE, finished_at="2026-11-30T03:00:00Z")
        assert jobs.runnable_jobs(include_windowed=True) == []
        assert jobs.job_states()[JobState.DONE] == 1 and sum(jobs.job_states().values()) == 1
        assert jobs.get_job("missing") is None

    def test_ids_by_prefix_and_listing_newest_first(self, jobs: JobStore) -> None:
        for id_, created in (("abc123", "2026-11-30T01:00:00Z"), ("abd456", "2026-11-30T02:00:00Z")):
            jobs.create_job(job_record(id_, 0, created), [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)])
        assert jobs.job_ids_starting("abc") == ["abc123"]
        assert sorted(jobs.job_ids_starting("ab")) == ["abc123", "abd456"]
        assert [j.id for j in jobs.list_jobs()] == ["abd456", "abc123"]

    def test_a_job_is_created_whole_or_not_at_all(self, jobs: JobStore) -> None:
        twice = [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)] * 2  # the same item twice: the insert fails
        try:
            jobs.create_job(job_record("broken", 0, "2026-11-30T01:00:00Z"), twice)
        except Exception:
            pass
        else:
            raise AssertionError("a job with a duplicate item was accepted")
        assert jobs.get_job("broken") is None and jobs.pending_items("broken", 10) == []


class LeasesTests:
    """`Leases`: one worker at a time per item, taken over when a lease runs out."""

    def test_claims_lease_items_to_one_worker_at_a_time(self, jobs: JobStore) -> None:
        items = [NewItem(i, "torch", {"text": str(i)}, str(i) * 64, None) for i in range(5)]
        jobs.create_job(job_record("j", 0, "2026-11-30T01:00:00Z"), items)
        first = jobs.claim_items("j", "w1", 2, lease_s=60)
        second = jobs.claim_items("j", "w2", 10, lease_s=60)
        assert [i.index for i in first] == [0, 1] and [i.index for i in second] == [2, 3, 4]
        assert jobs.claim_items("j", "w3", 10, lease_s=60) == []  # every item held
        assert len(jobs.pending_items("j", 10)) == 5  # still pending: claimed is not done
        assert jobs.renew_leases("w1", 60) == 2
        assert jobs.finish_item(first[0], ItemState.DONE, "sha256:" + "0" * 64, worker="w2") is False  # not its lease
        assert jobs.finish_item(first[0], ItemState.DONE, "sha256:" + "0" * 64, worker="w1") is True
        jobs.release_leases("w2")
        assert [i.index for i in jobs.claim_items("j", "w3", 10, lease_s=60)] == [2, 3, 4]

    def test_an_expired_lease_is_taken_over_and_its_holder_records_nothing(self, jobs: JobStore) -> None:
        jobs.create_job(
            job_record("j", 0, "2026-11-30T01:00:00Z"), [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)]
        )
        (held,) = jobs.claim_items("j", "dead", 10, lease_s=0.2)
        time.sleep(0.3)  # the lease ran out on the database's clock
        (taken,) = jobs.claim_items("j", "alive", 10, lease_s=60)
        assert taken.index == held.index
        assert jobs.finish_item(held, ItemState.DONE, "sha256:" + "1" * 64, worker="dead") is False
        assert jobs.renew_leases("dead", 60) == 0
        assert jobs.finish_item(taken, ItemState.DONE, "sha256:" + "1" * 64, worker="alive") is True
        assert jobs.job_counts("j") == {"pending": 0, "done": 1, "failed": 0, "completions_fetched": 0}

    def test_live_leases_list_what_each_worker_holds_until_it_runs_out_or_is_done(self, jobs: JobStore) -> None:
        items = [NewItem(i, "torch", {"text": str(i)}, str(i) * 64, None) for i in range(5)]
        jobs.create_job(job_record("j", 0, "2026-11-30T01:00:00Z"), items)
        held = jobs.claim_items("j", "w1", 3, lease_s=60)
        jobs.claim_items("j", "w2", 2, lease_s=0.2)
        time.sleep(0.3)  # w2's leases ran out: it holds nothing any more
        assert jobs.finish_item(held[0], ItemState.DONE, "sha256:" + "0" * 64, worker="w1")
        (lease,) = jobs.live_leases()
        assert (lease.worker, lease.job_id, lease.items) == ("w1", "j", 2) and 0 < lease.expires_in_s <= 60
        (lapsed,) = jobs.lapsed_leases()  # w2's, until another worker takes its items
        assert (lapsed.worker, lapsed.job_id, lapsed.items) == ("w2", "j", 2) and -60 < lapsed.expires_in_s < 0
        jobs.claim_items("j", "w3", 5, lease_s=60)
        assert jobs.lapsed_leases() == []
        jobs.release_leases("w1")
        assert [lease.worker for lease in jobs.live_leases()] == ["w3"]

    def test_concurrent_claims_never_take_one_item_twice(self, jobs: JobStore) -> None:
        from concurrent.futures import ThreadPoolExecutor

        jobs.create_job(
            job_record("j", 0, "2026-11-30T01:00:00Z"),
            [NewItem(i, "torch", {"text": str(i)}, f"{i:064d}", None) for i in range(60)],
        )

        def drain(worker: str) -> list[int]:
            taken = []
            while batch := jobs.claim_items("j", worker, 3, lease_s=60):
                taken += [i.index for i in batch]
            return taken

        with ThreadPoolExecutor(4) as pool:
            claimed = list(pool.map(drain, ["a", "b", "c", "d"]))
        every = [index for taken in claimed for index in taken]
        assert sorted(every) == list(range(60))  # each item exactly once


class CompletionsTests:
    """`Completions`: a refused sample falls back to the target."""

    def test_a_sample_sglang_refuses_falls_back_to_the_target(self, jobs: JobStore) -> None:
        items = [
            NewItem(i, backend, {"text": str(i)}, str(i) * 64, 8) for i in range(2) for backend in ("torch", "fla")
        ]
        jobs.create_job(job_record("j", 0, "2026-11-30T01:00:00Z"), items)
        jobs.fall_back_to_target("j", 0)
        assert {i.index for i in jobs.pending_items("j", 10, needing_completion=True)} == {1}
        refused = [i for i in jobs.pending_items("j", 10) if i.index == 0]
        assert len(refused) == 2 and all(i.completion_ids is None for i in refused)
        assert {i.completion_source for i in refused} == {"greedy:target"}


class JobStoreTests(JobsTests, LeasesTests, CompletionsTests):
    """The whole suite for warm jobs, for an engine that is all three (each part takes a JobStore: it sets
    jobs up)."""
