"""The contract suites every catalog engine passes unchanged, shipped with the protocols (as zarr ships
`zarr.testing.store.StoreTests`): a test module subclasses each suite and provides its fixture.

- `VersionCatalogTests` needs `open_versions`: a callable that opens a VersionCatalog over one database (calling it
  again reopens the same one).
- `JobStoreTests` (= `JobsTests` + `LeasesTests` + `CompletionsTests`; jobs_testing.py) needs `jobs`: a JobStore.
- `KeyValueTests` needs `kv`: a KeyValue.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from schemas.backend import Fingerprint
from schemas.chunks import ChunkDigests
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter
from schemas.manifest import AuditRecord, IntegrityRecord, LayerStats, Manifest, TensorInfo
from schemas.states import AuditStatus, CompletionSource, Integrity
from service.catalog.protocol import KeyValue, VersionStore

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
        assert (torch_tally.unchecked, fla_tally.unchecked) == (1, 0)  # a scrub read one, an audit the other
        assert [m.prompt_hash[0] for m in versions.needing_attention()] == ["a", "b", "c"]
        versions.set_integrity("sha256:" + "1" * 64, None)  # repaired: its record gone, unchecked again
        assert versions.tallies()[0].damaged == 0 and versions.count() == 3
        assert [t.unchecked for t in versions.tallies()] == [2, 0]
        intact = IntegrityRecord(status=Integrity.INTACT, checked_at="2026-12-02T00:00:00.000000Z")
        versions.set_integrity("sha256:" + "2" * 64, intact)
        versions.set_integrity("sha256:" + "2" * 64, intact)  # checked twice, counted once
        assert [t.unchecked for t in versions.tallies()] == [1, 0]
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


class KeyValueTests:
    def test_set_get_overwrite_and_clear(self, kv: KeyValue) -> None:
        assert kv.kv_get("window.manual_until") is None
        kv.kv_set("window.manual_until", "2026-11-30T01:00:00Z")
        kv.kv_set("window.manual_until", "2026-11-30T02:00:00Z")
        assert kv.kv_get("window.manual_until") == "2026-11-30T02:00:00Z"
        kv.kv_set("window.manual_until", None)
        assert kv.kv_get("window.manual_until") is None
