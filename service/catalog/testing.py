"""The contract suites every catalog engine passes unchanged, shipped with the protocols (as zarr ships
`zarr.testing.store.StoreTests`): a test module subclasses each suite and provides its fixture.

- `VersionCatalogTests` needs `open_versions`: a callable that opens a VersionCatalog over one database (calling it
  again reopens the same one).
- `JobStoreTests` (= `JobsTests` + `LeasesTests` + `CompletionsTests`) needs `jobs`: a JobStore.
- `KeyValueTests` needs `kv`: a KeyValue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from schemas.backend import Fingerprint
from schemas.chunks import ChunkDigests
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter
from schemas.manifest import AuditRecord, IntegrityRecord, LayerStats, Manifest, TensorInfo
from schemas.states import AuditStatus, CompletionSource, Integrity, ItemState, JobState
from service.catalog.job_records import JobRecord, NewItem
from service.catalog.protocol import JobStore, KeyValue, VersionStore

FEATURESET = FeatureSet(layers=[1, 2])
FINGERPRINT = Fingerprint(
    torch="t", transformers="x", device="cpu", dtype="bfloat16", attn_implementation="sdpa", kernels={}
)


def manifest(prompt: str = "a", backend: str = "torch", content: str = "1", created: str = "2026-11-30T00:00:00Z"):
    """A small manifest whose hashes repeat one character, so tests read well."""
    return Manifest(
        prompt_hash=prompt * 64,
        model_revision="sha256:" + "e" * 64,
        backend=backend,
        featureset=FEATURESET,
        featureset_id=FEATURESET.id,
        content_hash="sha256:" + content * 64,
        sample={"text": "x"},
        num_tokens=3,
        prompt_tokens=3,
        completion_tokens=0,
        tensors={"input_ids": TensorInfo(dtype="int32", shape=[3])},
        layer_stats=[],
        created_at=created,
        fingerprint=FINGERPRINT,
    )


RICH = {
    "sample": {"messages": [{"role": "user", "content": "héllo ✓", "tool_calls": [{"a": [1, None]}]}]},
    "sample_id": "s-1",
    "completion_tokens": 1,
    "prompt_tokens": 2,
    "completion_source": CompletionSource.TEXT,
    "tensors": {
        "hidden_states": TensorInfo(
            dtype="bfloat16",
            shape=[3, 2, 4],
            chunks=ChunkDigests(shape=[3, 1, 4], digest="blake3-128", digests=["0" * 32, "f" * 32]),
        ),
        "input_ids": TensorInfo(dtype="int32", shape=[3]),
    },
    "chunks_digest": "blake3:" + "9" * 64,
    "layer_stats": [
        LayerStats(layer=1, mean=-0.1, std=0.30000000000000004, absmax=2.5),
        LayerStats(layer=2, mean=0, std=1e-300, absmax=7),
    ],
    "content_flags": ["layer 2 std 9x layer 1"],
}


class VersionCatalogTests:
    def test_add_is_idempotent_per_version(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        stored, added = versions.add(manifest())
        assert added and stored.seq is not None
        again, added_again = versions.add(manifest())
        assert not added_again and again.seq == stored.seq
        assert versions.count() == 1

    def test_versions_newest_first(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        versions.add(manifest(content="1"))
        versions.add(manifest(content="2"))
        assert [v.content_hash[-1] for v in versions.versions(manifest().key)] == ["2", "1"]

    def test_find_filters_and_pages(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        for prompt in "abc":
            for backend in ("torch", "fla"):
                versions.add(manifest(prompt=prompt, backend=backend, content=prompt))
        assert len(versions.find(EntryFilter(backend="fla"))) == 3
        assert len(versions.find(EntryFilter(prompt_hash="b" * 64))) == 2
        assert len(versions.find(EntryFilter(featureset_id=FEATURESET.id))) == 6
        first = versions.find(EntryFilter(), limit=4)
        rest = versions.find(EntryFilter(), limit=4, after_seq=first[-1].seq or 0)
        assert len(first) == 4 and len(rest) == 2
        assert {m.seq for m in first}.isdisjoint({m.seq for m in rest})

    def test_hashes_match_as_prefixes(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        for prompt in "ab":
            versions.add(manifest(prompt=prompt, content=prompt))
        assert [m.prompt_hash[0] for m in versions.find(EntryFilter(prompt_hash="bbbbbb"))] == ["b"]
        assert [m.prompt_hash[0] for m in versions.find(EntryFilter(content_hash="sha256:aaaaaa"))] == ["a"]
        assert versions.find(EntryFilter(prompt_hash="abab")) == []

    def test_since(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        versions.add(manifest(prompt="a", created="2026-11-01T00:00:00.000000Z"))
        versions.add(manifest(prompt="b", created="2026-11-30T00:00:00.000000Z"))
        found = versions.find(EntryFilter(since="2026-11-15T00:00:00.000000Z"))
        assert [m.prompt_hash[0] for m in found] == ["b"]

    def test_audit_shows_in_the_manifest(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        versions.add(manifest())
        record = AuditRecord(
            status=AuditStatus.REPRODUCED,
            audited_at="2026-11-30T01:00:00.000000Z",
            reproduced_hash=manifest().content_hash,
            fingerprint=FINGERPRINT,
        )
        versions.set_audit(manifest().key, manifest().content_hash, record)
        assert versions.versions(manifest().key)[0].audit == record

    def test_survives_reopen(self, open_versions: Callable[[], VersionStore]) -> None:
        open_versions().add(manifest())
        assert open_versions().versions(manifest().key)[0].content_hash == manifest().content_hash

    def test_a_version_reads_back_field_for_field(self, open_versions: Callable[[], VersionStore]) -> None:
        """Everything a manifest holds, kept however the engine lays its rows out: chunk digests, statistics, flags,
        a sample with nested and non-ASCII members, and the records the catalog adds."""
        versions = open_versions()
        rich = manifest(prompt="c").model_copy(update=RICH)
        stored, _ = versions.add(rich)
        assert stored == rich.model_copy(update={"seq": stored.seq})
        record = IntegrityRecord(status=Integrity.CORRUPT, checked_at="2026-12-01T00:00:00.000000Z", detail="crc")
        versions.set_integrity(rich.content_hash, record)
        audit = AuditRecord(status=AuditStatus.REPRODUCED, audited_at="2026-12-01T00:00:00.000000Z", detail="ok")
        versions.set_audit(rich.key, rich.content_hash, audit)
        (again,) = open_versions().versions(rich.key)
        assert again == rich.model_copy(update={"seq": stored.seq, "integrity": record, "audit": audit})
        # and a listing's document is the whole manifest's JSON, every field, defaults and nulls included
        ((seq, document),) = versions.find_documents(EntryFilter(prompt_hash=rich.prompt_hash))
        assert seq == stored.seq and json.loads(document) == json.loads(again.model_dump_json())

    def test_tallies_are_kept_as_versions_are_added_and_marked(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        versions.add(manifest(prompt="a", content="1"))
        versions.add(manifest(prompt="a", content="1"))  # there already: counted once
        versions.add(manifest(prompt="b", content="2").model_copy(update={"content_flags": ["odd"]}))
        versions.add(manifest(prompt="c", backend="fla", content="3"))
        torch_tally, fla_tally = versions.tallies()
        assert (torch_tally.backend, torch_tally.entries, torch_tally.tokens, torch_tally.flagged) == ("torch", 2, 6, 1)
        assert torch_tally.bytes == 2 * 3 * 4 and (fla_tally.backend, fla_tally.entries) == ("fla", 1)
        damaged = IntegrityRecord(status=Integrity.CORRUPT, checked_at="2026-12-01T00:00:00.000000Z")
        versions.set_integrity("sha256:" + "1" * 64, damaged)
        versions.set_integrity("sha256:" + "1" * 64, damaged)  # marked twice, counted once
        suspect = AuditRecord(status=AuditStatus.SUSPECT, audited_at="2026-12-01T00:00:00.000000Z")
        versions.set_audit(manifest(prompt="c", backend="fla").key, "sha256:" + "3" * 64, suspect)
        torch_tally, fla_tally = open_versions().tallies()
        assert (torch_tally.damaged, torch_tally.suspect, fla_tally.suspect) == (1, 0, 1)
        assert [m.prompt_hash[0] for m in versions.needing_attention()] == ["a", "b", "c"]
        versions.set_integrity("sha256:" + "1" * 64, None)  # repaired
        assert versions.tallies()[0].damaged == 0 and versions.count() == 3
        assert [m.prompt_hash[0] for m in versions.needing_attention(after_seq=0)] == ["b", "c"]

    def test_many_are_added_a_batch_at_a_time(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        versions.add(manifest(prompt="a", content="a"))
        many = [manifest(prompt=p, content=p) for p in "abcde"]
        assert versions.add_many(iter(many), batch=2) == 4  # "a" was there
        assert [m.prompt_hash[0] for m in versions.find(EntryFilter())] == list("abcde")
        assert versions.count() == 5 and versions.tallies()[0].tokens == 15

    def test_keys_are_listed_without_their_manifests(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        for prompt in "abcd":
            versions.add(manifest(prompt=prompt, content=prompt))
        keys = versions.find_keys(EntryFilter(backend="torch"), limit=3)
        assert [k.listed.key() for k in keys] == [m.feature_key() for m in versions.find(EntryFilter(), limit=3)]
        assert [k.listed.num_tokens for k in keys] == [3, 3, 3]
        assert [k.listed.prompt_hash[0] for k in versions.find_keys(EntryFilter(), after_seq=keys[-1].seq)] == ["d"]
        assert versions.find_keys(EntryFilter(backend="fla")) == []  # a key space never stored: no query at all

    def test_odd_and_even_prefixes_and_the_top_of_the_range(self, open_versions: Callable[[], VersionStore]) -> None:
        versions = open_versions()
        for prompt in ("ab" + "0" * 62, "ac" + "0" * 62, "f" * 64):
            versions.add(manifest().model_copy(update={"prompt_hash": prompt}))
        for prefix, found in (("a", 2), ("ab", 1), ("abc", 0), ("ab0", 1), ("f", 1), ("ff", 1), ("fff", 1)):
            assert len(versions.find(EntryFilter(prompt_hash=prefix))) == found, prefix


def _job(id_: str, priority: int, created: str, run_now: bool = False) -> JobRecord:
    return JobRecord(
        id_, JobState.QUEUED, priority, run_now, ["torch"], {"layers": [1]}, None, created, None, None, 0, 0.0
    )


class JobsTests:
    """`Jobs`: created whole, run by priority then age, their states, errors, work and listing."""

    def test_jobs_run_by_priority_then_age_and_windowed_jobs_wait(self, jobs: JobStore) -> None:
        jobs.create_job(_job("old", 0, "2026-11-30T01:00:00Z"), [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)])
        jobs.create_job(_job("urgent", 5, "2026-11-30T02:00:00Z"), [NewItem(0, "torch", {"text": "b"}, "b" * 64, None)])
        now = _job("now", -1, "2026-11-30T03:00:00Z", run_now=True)
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
        jobs.create_job(_job("j", 0, "2026-11-30T01:00:00Z"), items)
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
        jobs.set_job_state("j", JobState.DONE, finished_at="2026-11-30T03:00:00Z")
        assert jobs.runnable_jobs(include_windowed=True) == []
        assert jobs.get_job("missing") is None

    def test_ids_by_prefix_and_listing_newest_first(self, jobs: JobStore) -> None:
        for id_, created in (("abc123", "2026-11-30T01:00:00Z"), ("abd456", "2026-11-30T02:00:00Z")):
            jobs.create_job(_job(id_, 0, created), [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)])
        assert jobs.job_ids_starting("abc") == ["abc123"]
        assert sorted(jobs.job_ids_starting("ab")) == ["abc123", "abd456"]
        assert [j.id for j in jobs.list_jobs()] == ["abd456", "abc123"]

    def test_a_job_is_created_whole_or_not_at_all(self, jobs: JobStore) -> None:
        twice = [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)] * 2  # the same item twice: the insert fails
        try:
            jobs.create_job(_job("broken", 0, "2026-11-30T01:00:00Z"), twice)
        except Exception:
            pass
        else:
            raise AssertionError("a job with a duplicate item was accepted")
        assert jobs.get_job("broken") is None and jobs.pending_items("broken", 10) == []


class LeasesTests:
    """`Leases`: one worker at a time per item, taken over when a lease runs out."""

    def test_claims_lease_items_to_one_worker_at_a_time(self, jobs: JobStore) -> None:
        items = [NewItem(i, "torch", {"text": str(i)}, str(i) * 64, None) for i in range(5)]
        jobs.create_job(_job("j", 0, "2026-11-30T01:00:00Z"), items)
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
        jobs.create_job(_job("j", 0, "2026-11-30T01:00:00Z"), [NewItem(0, "torch", {"text": "a"}, "a" * 64, None)])
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
        jobs.create_job(_job("j", 0, "2026-11-30T01:00:00Z"), items)
        held = jobs.claim_items("j", "w1", 3, lease_s=60)
        jobs.claim_items("j", "w2", 2, lease_s=0.2)
        time.sleep(0.3)  # w2's leases ran out: it holds nothing any more
        assert jobs.finish_item(held[0], ItemState.DONE, "sha256:" + "0" * 64, worker="w1")
        (lease,) = jobs.live_leases()
        assert (lease.worker, lease.job_id, lease.items) == ("w1", "j", 2) and 0 < lease.expires_in_s <= 60
        jobs.release_leases("w1")
        assert jobs.live_leases() == []

    def test_concurrent_claims_never_take_one_item_twice(self, jobs: JobStore) -> None:
        from concurrent.futures import ThreadPoolExecutor

        jobs.create_job(
            _job("j", 0, "2026-11-30T01:00:00Z"),
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
        jobs.create_job(_job("j", 0, "2026-11-30T01:00:00Z"), items)
        jobs.fall_back_to_target("j", 0)
        assert {i.index for i in jobs.pending_items("j", 10, needing_completion=True)} == {1}
        refused = [i for i in jobs.pending_items("j", 10) if i.index == 0]
        assert len(refused) == 2 and all(i.completion_ids is None for i in refused)
        assert {i.completion_source for i in refused} == {"greedy:target"}


class JobStoreTests(JobsTests, LeasesTests, CompletionsTests):
    """The whole suite for warm jobs, for an engine that is all three (each part takes a JobStore: it sets
    jobs up)."""


class KeyValueTests:
    def test_set_get_overwrite_and_clear(self, kv: KeyValue) -> None:
        assert kv.kv_get("window.manual_until") is None
        kv.kv_set("window.manual_until", "2026-11-30T01:00:00Z")
        kv.kv_set("window.manual_until", "2026-11-30T02:00:00Z")
        assert kv.kv_get("window.manual_until") == "2026-11-30T02:00:00Z"
        kv.kv_set("window.manual_until", None)
        assert kv.kv_get("window.manual_until") is None
