"""The training side: batch endpoint, parallel gets, the disk cache and the torch Datasets, against a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from torch.utils.data import DataLoader

from client import (
    EntryStream,
    FeatureCache,
    FeatureClient,
    FeatureDataset,
    IntegrityError,
    NotFoundError,
    fetch_sample,
    pack_collate,
    pad_collate,
)
from client.chunk_checks import CheckedCopy
from client.receive import ReceivedCopy
from client.training.torch_data import to_sample
from schemas import chunk_body
from schemas.http import BODY_FORMATS, BodyFormat
from tests.conftest import wait_for
from tests.support.flipping_proxy import FlippingProxy

CHUNKS_MEDIA_TYPE = BODY_FORMATS[BodyFormat.CHUNKS].media_type


@pytest.fixture
def stored(client: FeatureClient) -> list:
    samples = [{"id": f"s{i}", "text": "def handler(event): return event " * (i + 1)} for i in range(9)]
    client.extract(samples, featureset=["embed", 1, 2, 5])
    return sorted(client.entries(), key=lambda m: m.seq)


def feature_requests(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    counts = re.findall(
        r'hsstore_http_requests_total\{method="(?:GET|POST)",route="/v1/features[^"]*",status="200"\} (\S+)', text
    )
    return sum(float(c) for c in counts)


def test_batch_endpoint_matches_single_gets(client: FeatureClient, stored: list) -> None:
    keys = [{"prompt_hash": m.prompt_hash} for m in stored[:4]]
    keys.append({"prompt_hash": stored[5].prompt_hash, "layers": [1, 5], "tokens": (2, 9)})
    batch = client.get_batch(keys)
    singles = client.get_many(keys)
    assert [f.content_hash for f in batch] == [f.content_hash for f in singles]
    for one, other in zip(batch, singles, strict=True):
        assert torch.equal(one.hidden_states, other.hidden_states) and one.layers == other.layers
    assert batch[-1].layers == [1, 5] and batch[-1].hidden_states.shape[:2] == (7, 2)


def test_batch_refuses_bad_or_missing_keys_before_sending_anything(
    client: FeatureClient, http: httpx.Client, stored: list
) -> None:
    good = {"prompt_hash": stored[0].prompt_hash}
    assert http.post("/v1/features:batch", json={"keys": [good, {"prompt_hash": "xyz"}]}).status_code == 422
    assert http.post("/v1/features:batch", json={"keys": []}).status_code == 422
    with pytest.raises(NotFoundError):
        client.get_batch([good, {"prompt_hash": "0" * 64}])
    with pytest.raises(NotFoundError, match="not in this entry"):
        client.get_batch([good, {"prompt_hash": stored[1].prompt_hash, "layers": [7]}])


def test_store_reads_only_the_chunks_a_slice_needs(
    client: FeatureClient, settings, stored: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    import service.storage.shard_reader as reader

    long = {"text": "x = [i for i in range(10)]\n" * 300}
    manifest = client.extract([long], featureset=["embed", 1, 2, 5]).results[0].manifest
    assert manifest.num_tokens > 1024
    # the service decoding (safetensors): it reads only the chunks the slice needs
    decoding = FeatureClient(http=client._http, wire_format="safetensors")
    read = []
    real_pread = reader.os.pread
    monkeypatch.setattr(reader.os, "pread", lambda fd, n, offset: read.append(n) or real_pread(fd, n, offset))
    decoding.get(long, layers=[2], tokens=(0, 200))
    sliced = sum(read)
    read.clear()
    decoding.get(long)
    assert sliced * 10 < sum(read)
    # the stored chunks sent as they lie: only those the slice needs go out
    accept = {"accept": CHUNKS_MEDIA_TYPE}
    path = f"/v1/features/{manifest.prompt_hash}"
    whole = client._http.get(path, headers=accept)
    part = client._http.get(path, params={"layers": "2", "tokens": "0:200"}, headers=accept)
    assert whole.headers["content-type"] == part.headers["content-type"] == CHUNKS_MEDIA_TYPE
    (whole_header, _, _), (part_header, _, _) = (chunk_body.decode_header(memoryview(r.content)) for r in (whole, part))
    assert part_header.data_bytes * 10 < whole_header.data_bytes


def test_cache_second_epoch_makes_no_request(live_url: str, http: httpx.Client, stored: list, tmp_path: Path) -> None:
    dataset = FeatureDataset(live_url, stored, cache_dir=tmp_path / "cache")
    first = [dataset[i]["content_hash"] for i in range(len(dataset))]
    after_first = feature_requests(http)
    assert after_first >= len(stored)
    second = [dataset[i]["content_hash"] for i in range(len(dataset))]
    assert second == first == [m.content_hash for m in stored]
    assert feature_requests(http) == after_first


@pytest.mark.parametrize("wire_format", ["chunks", "safetensors"])
def test_cache_is_bounded_lru_and_drops_damaged_files(
    client: FeatureClient, stored: list, tmp_path: Path, wire_format: BodyFormat
) -> None:
    """Whichever wire format an entry came in, the cache keeps its decoded tensors, gives the bits the service
    gives, checks them chunk by chunk against the write-time digests, and drops a damaged file."""
    cache = FeatureCache(tmp_path / "c", max_bytes=10**9)
    with FeatureClient(str(client._http.base_url), cache=cache, wire_format=wire_format) as cached:
        for m in stored[:3]:
            cached.get(prompt_hash=m.prompt_hash)
        sizes = sorted(p.stat().st_size for p in cache._files())
        cache.max_bytes = sizes[-1] + sizes[-2]
        assert cache.get(stored[0].content_hash) is not None  # now the most recently used
        cached.get(prompt_hash=stored[3].prompt_hash)  # forces an eviction
        assert cache.size() <= cache.max_bytes
        assert cache.get(stored[1].content_hash) is None and cache.get(stored[0].content_hash) is not None
        victim = cache._path(stored[0].content_hash)
        expected = client.get(prompt_hash=stored[0].prompt_hash).hidden_states
        assert torch.equal(cache.get(stored[0].content_hash).hidden_states, expected)
        intact = victim.read_bytes()
        a_digest = intact.index(stored[0].tensors["hidden_states"].chunks.digests[0].encode())
        # a hidden-state chunk, the last bytes (input_ids), a recorded chunk digest in the manifest
        for position in (len(intact) // 2, len(intact) - 3, a_digest + 3):
            damaged = bytearray(intact)
            damaged[position] ^= 1
            victim.write_bytes(damaged)
            assert cache.get(stored[0].content_hash) is None and not victim.exists()


def test_cached_hidden_states_checked_as_they_are_collated_give_the_batch_of_the_ordinary_path(
    client: FeatureClient, stored: list, tmp_path: Path
) -> None:
    """`fetch_sample` hands a cached entry's hidden states over as a `CheckedCopy`: nothing can read them but
    `pad_collate`, which checks every chunk against its write-time digest as it copies it in, and gives the batch
    the ordinary path gives; a damaged chunk fails the batch and drops the file."""
    cache = FeatureCache(tmp_path / "c")
    with FeatureClient(str(client._http.base_url), cache=cache) as cached:
        keys = [m.feature_key() for m in stored[:4]]
        ordinary = pad_collate([to_sample(cached.fetch(k)) for k in keys])  # fills the cache, verified whole
        samples = [fetch_sample(cached, k) for k in keys]
        assert all(isinstance(s["hidden_states"], CheckedCopy) for s in samples)
        checked = pad_collate(samples)
        for name, value in ordinary.items():
            assert torch.equal(checked[name], value) if isinstance(value, torch.Tensor) else checked[name] == value
        victim = cache._path(stored[2].content_hash)
        intact = victim.read_bytes()
        damaged = bytearray(intact)
        damaged[len(intact) // 2] ^= 1  # inside hidden_states, the body's bulk
        victim.write_bytes(damaged)
        with pytest.raises(IntegrityError, match="hidden_states: a chunk differs"):
            pad_collate([fetch_sample(cached, k) for k in keys])
        assert not victim.exists()
        assert torch.equal(
            pad_collate([fetch_sample(cached, k) for k in keys])["hidden_states"], ordinary["hidden_states"]
        )


@pytest.mark.parametrize("where", [lambda n: n // 2, lambda n: n - 5], ids=["middle", "end"])
def test_served_hidden_states_decoded_straight_into_the_batch_give_the_batch_of_the_ordinary_path(
    client: FeatureClient, live_url: str, stored: list, where
) -> None:
    """Without a cache, `fetch_sample` leaves a served entry's hidden states in their received chunk frames (a
    `ReceivedCopy`): `pad_collate` checks and decodes each chunk straight into the batch, which is the ordinary
    path's; a byte flipped on the socket fails the read or the batch, wherever it lands."""
    keys = [m.feature_key() for m in stored[:4]]
    ordinary = pad_collate([to_sample(client.fetch(k)) for k in keys])
    samples = [fetch_sample(client, k) for k in keys]
    assert all(isinstance(s["hidden_states"], ReceivedCopy) for s in samples)
    direct = pad_collate(samples)
    for name, value in ordinary.items():
        assert torch.equal(direct[name], value) if isinstance(value, torch.Tensor) else direct[name] == value
    sliced = fetch_sample(client, {**keys[0].model_dump(exclude_none=True), "layers": [2]})
    assert sliced["hidden_states"].shape[1] == 1  # a slice is decoded as it always was
    host, port = live_url.removeprefix("http://").split(":")
    proxy = FlippingProxy((host, int(port)), where)
    try:
        with FeatureClient(proxy.url) as bad, pytest.raises(IntegrityError):
            pad_collate([fetch_sample(bad, keys[3])])
    finally:
        proxy.close()


def test_dataloader_two_workers_reads_every_entry_once(live_url: str, stored: list, tmp_path: Path) -> None:
    stream = EntryStream(live_url, prefetch=2, cache_dir=tmp_path / "shared-cache")
    loader = DataLoader(stream, batch_size=2, num_workers=2, collate_fn=pad_collate)
    seen = [h for batch in loader for h in batch["content_hash"]]
    assert sorted(seen) == sorted(m.content_hash for m in stored)
    assert len(seen) == len(set(seen))
    # both workers filled one cache directory; every file in it verifies
    cache = FeatureCache(tmp_path / "shared-cache")
    assert all(cache.get(m.content_hash) is not None for m in stored)


def test_a_seeded_stream_shuffles_the_whole_listing_alike_on_every_rank(live_url: str, stored: list) -> None:
    def epoch(rank: int, seed: int, epoch: int, world_size: int = 2) -> list[str]:
        stream = EntryStream(live_url, prefetch=2, rank=rank, world_size=world_size, seed=seed)
        stream.set_epoch(epoch)
        return [sample["content_hash"] for sample in stream]

    listing = [m.content_hash for m in FeatureClient(live_url).entries()]
    first, second = epoch(0, seed=7, epoch=0), epoch(1, seed=7, epoch=0)
    assert sorted(first + second) == sorted(listing) and not set(first) & set(second)  # disjoint, complete
    assert epoch(0, seed=7, epoch=0) == first  # the same seed and epoch: the same order, on any process
    whole = epoch(0, seed=7, epoch=0, world_size=1)
    assert whole[0::2] == first and whole[1::2] == second  # every rank cut from one global permutation
    assert whole != listing and sorted(whole) == sorted(listing)
    assert epoch(0, seed=7, epoch=1, world_size=1) != whole  # a new order each epoch
    assert epoch(0, seed=8, epoch=0, world_size=1) != whole
    assert [s["content_hash"] for s in EntryStream(live_url, prefetch=2)] == listing  # no seed: the listing's order
    backend = stored[0].backend
    mine = [m.content_hash for m in FeatureClient(live_url).entries(backend=backend)]
    assert [s["content_hash"] for s in EntryStream.listing(live_url, backend=backend, prefetch=2)] == mine
    assert list(EntryStream.listing(live_url, since="2999-01-01T00:00:00Z")) == []
    assert list(EntryStream.listing(live_url, backend=backend, featureset_id="f" * 16, seed=1)) == []


def test_map_dataset_with_workers_and_collation(live_url: str, stored: list) -> None:
    dataset = FeatureDataset(live_url, stored, layers=[1, 5])
    loader = DataLoader(dataset, batch_size=3, num_workers=2, collate_fn=pack_collate)
    batches = list(loader)
    total = sum(m.num_tokens for m in stored)
    assert sum(b["hidden_states"].shape[0] for b in batches) == total
    first = batches[0]
    assert first["hidden_states"].shape[1:] == (2, 64)
    assert first["cu_seqlens"][-1] == first["input_ids"].shape[0]
    assert first["position_ids"][0] == 0


def test_pad_collate_masks_padding(client: FeatureClient, stored: list) -> None:
    by_length = sorted(stored, key=lambda m: m.num_tokens)
    samples = [FeatureDataset(str(client._http.base_url), [m])[0] for m in (by_length[0], by_length[-1])]
    batch = pad_collate(samples)
    short, long_ = (s["input_ids"].shape[0] for s in samples)
    assert batch["hidden_states"].shape[:2] == (2, long_)
    assert batch["attention_mask"][0].sum() == short and not batch["hidden_states"][0, short:].any()


def _sample(length: int, mask_from: int | None = None, with_targets: bool = False) -> dict:
    sample = {
        "hidden_states": torch.full((length, 2, 4), float(length), dtype=torch.bfloat16),
        "input_ids": torch.arange(length, dtype=torch.int32) + 1,
        "prompt_hash": f"p{length}",
        "content_hash": f"sha256:{length}",
    }
    if mask_from is not None:
        sample["loss_mask"] = (torch.arange(length) >= mask_from).to(torch.uint8)
    if with_targets:
        sample["target_ids"] = torch.arange(length, dtype=torch.int32) + 100
    return sample


def test_a_batch_mixing_entries_with_and_without_a_completion_masks_every_row() -> None:
    """An entry without a completion trains on every token: in a mixed batch its loss_mask row is all ones (zero
    on pads), never dropped, so the trainer cannot silently train the masked rows on their prompts."""
    with_mask, without = _sample(5, mask_from=3), _sample(3)
    padded = pad_collate([with_mask, without])
    assert padded["loss_mask"].tolist() == [[0, 0, 0, 1, 1], [1, 1, 1, 0, 0]]
    assert padded["attention_mask"].tolist() == [[True] * 5, [True] * 3 + [False] * 2]
    packed = pack_collate([without, with_mask])
    assert packed["loss_mask"].tolist() == [1, 1, 1, 0, 0, 0, 1, 1]
    assert "loss_mask" not in pad_collate([_sample(2), _sample(3)])  # none has one: every token counts
    assert pad_collate([_sample(2, 1), _sample(3, 2)])["loss_mask"].tolist() == [[0, 1, 0], [0, 0, 1]]


def test_a_batch_mixing_entries_with_and_without_target_ids_is_refused() -> None:
    with pytest.raises(ValueError, match="target_ids"):
        pad_collate([_sample(3, with_targets=True), _sample(2)])
    with pytest.raises(ValueError, match="target_ids"):
        pack_collate([_sample(3), _sample(2, with_targets=True)])


def test_a_read_replica_of_several_processes_serves_the_store(
    client: FeatureClient, stored: list, settings, server_process, tiny_model_dir: Path
) -> None:
    """`serve --processes 2` without a model: two uvicorn processes over one store, the same verified bits."""
    env = {"HSSTORE_DATA_DIR": str(settings.data_dir)}
    replica = server_process(env, args=["--processes", "2"]).start()
    keys = [m.feature_key() for m in stored]
    with FeatureClient(replica.url, max_connections=4) as reader:
        for got, want in zip(reader.get_many(keys), client.get_many(keys), strict=True):
            assert got.content_hash == want.content_hash and torch.equal(got.hidden_states, want.hidden_states)
    started = lambda: len(set(re.findall(r"Started server process \[(\d+)\]", replica.output()))) == 2  # noqa: E731
    wait_for(started, what="both processes up")  # ready once the first one is
    refused = subprocess.run(
        [sys.executable, "-m", "hsstore.cli", "serve", "--processes", "2", "--model-dir", str(tiny_model_dir)],
        env={**os.environ, **env, "HSSTORE_PORT": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "only a service without a model" in refused.stdout + refused.stderr
