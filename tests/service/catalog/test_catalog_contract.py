"""One contract every Catalog backend passes unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.backend import Fingerprint
from schemas.featureset import FeatureSet
from schemas.manifest import Manifest, TensorInfo
from service.catalog import Catalog, EntryFilter, SqliteCatalog

FS = FeatureSet(layers=[1, 2])


def manifest(prompt: str = "a", backend: str = "torch", content: str = "1", created: str = "2026-11-30T00:00:00Z"):
    return Manifest(
        prompt_hash=prompt * 64,
        model_revision="sha256:" + "e" * 64,
        backend=backend,
        featureset=FS,
        featureset_id=FS.id,
        content_hash="sha256:" + content * 64,
        sample={"text": "x"},
        num_tokens=3,
        prompt_tokens=3,
        completion_tokens=0,
        tensors={"input_ids": TensorInfo(dtype="int32", shape=[3])},
        layer_stats=[],
        created_at=created,
        fingerprint=Fingerprint(
            torch="t", transformers="x", device="cpu", dtype="bfloat16", attn_implementation="sdpa", kernels={}
        ),
    )


@pytest.fixture(params=["sqlite"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    cat = SqliteCatalog(tmp_path / "catalog.sqlite")
    yield cat
    cat.close()


class TestCatalogContract:
    def test_add_is_idempotent_per_version(self, catalog: Catalog) -> None:
        stored, added = catalog.add(manifest())
        assert added and stored.seq is not None
        again, added_again = catalog.add(manifest())
        assert not added_again and again.seq == stored.seq
        assert catalog.count() == 1

    def test_versions_newest_first(self, catalog: Catalog) -> None:
        catalog.add(manifest(content="1"))
        catalog.add(manifest(content="2"))
        versions = catalog.versions(manifest().key)
        assert [v.content_hash[-1] for v in versions] == ["2", "1"]

    def test_find_filters_and_pages(self, catalog: Catalog) -> None:
        for prompt in "abc":
            for backend in ("torch", "fla"):
                catalog.add(manifest(prompt=prompt, backend=backend, content=prompt))
        assert len(catalog.find(EntryFilter(backend="fla"))) == 3
        assert len(catalog.find(EntryFilter(prompt_hash="b" * 64))) == 2
        first = catalog.find(EntryFilter(), limit=4)
        rest = catalog.find(EntryFilter(), limit=4, after_seq=first[-1].seq or 0)
        assert len(first) == 4 and len(rest) == 2
        assert {m.seq for m in first}.isdisjoint({m.seq for m in rest})

    def test_since(self, catalog: Catalog) -> None:
        catalog.add(manifest(prompt="a", created="2026-11-01T00:00:00.000000Z"))
        catalog.add(manifest(prompt="b", created="2026-11-30T00:00:00.000000Z"))
        assert [m.prompt_hash[0] for m in catalog.find(EntryFilter(since="2026-11-15T00:00:00.000000Z"))] == ["b"]

    def test_survives_reopen(self, tmp_path: Path) -> None:
        path = tmp_path / "c.sqlite"
        first = SqliteCatalog(path)
        first.add(manifest())
        first.close()
        reopened = SqliteCatalog(path)
        assert reopened.versions(manifest().key)[0].content_hash == manifest().content_hash
        reopened.close()


def test_jobs_run_by_priority_then_age_and_windowed_jobs_wait(catalog: Catalog) -> None:
    from service.catalog.jobs import JobRecord

    def job(id_: str, priority: int, created: str, run_now: bool = False) -> JobRecord:
        return JobRecord(
            id_, "queued", priority, run_now, ["torch"], {"layers": [1]}, None, created, None, None, 0, 0.0
        )

    catalog.create_job(job("old", 0, "2026-11-30T01:00:00Z"), [(0, "torch", {"text": "a"}, "a" * 64, None)])
    catalog.create_job(job("urgent", 5, "2026-11-30T02:00:00Z"), [(0, "torch", {"text": "b"}, "b" * 64, None)])
    catalog.create_job(job("now", -1, "2026-11-30T03:00:00Z", run_now=True), [(0, "torch", {"text": "c"}, "c" * 64, 4)])
    assert [j.id for j in catalog.runnable_jobs(include_windowed=True)] == ["urgent", "old", "now"]
    assert [j.id for j in catalog.runnable_jobs(include_windowed=False)] == ["now"]
    (item,) = catalog.pending_items("now", 10, needing_completion=True)
    catalog.set_completion("now", 0, [7, 8], "greedy:sglang")
    assert catalog.pending_items("now", 10, needing_completion=True) == []
    catalog.finish_item(item, "done", content_hash="sha256:" + "0" * 64)
    assert catalog.job_counts("now") == {"done": 1, "completions_fetched": 1}
