"""Features as a Ray Data source on a local Ray cluster (127.0.0.1): a dataset snapshot read into a Ray Dataset by
direct reads from moto's S3 server, each row the entry the client reads, batches from `iter_torch_batches` what the
torch feed collates, and a changed byte in the bucket refused."""

from __future__ import annotations

import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from itertools import chain

import obstore
import pytest
import ray
import torch
from ray.util.annotations import RayDeprecationWarning

from client import FeatureClient
from client.errors import DirectReadsUnavailableError
from client.training.collate import pad_collate
from client.training.length_buckets import bucketed_batches
from client.training.ray_pools import PoolDoesNotFit
from client.training.ray_source import pad_features, read_features
from client.training.torch_data import to_sample
from schemas.manifest import Manifest
from tests.support.s3_server import Bucket

pytestmark = pytest.mark.usefixtures("local_ray")
LAYERS = ["embed", 1, 3]


@pytest.fixture
def snapshot(s3_url: str) -> list[Manifest]:
    samples = [{"text": f"def ray_source_{i}(x): return x - {i}\n" * (2 + 2 * i)} for i in range(5)]
    with FeatureClient(s3_url) as client:
        written = [r.manifest for r in client.extract(samples, featureset=LAYERS).results]
        client.create_dataset("ray-train", [m.feature_key() for m in written])
    return written


def test_a_snapshot_read_as_a_ray_dataset_is_what_the_client_reads(s3_url: str, snapshot: list[Manifest]) -> None:
    rows = read_features(s3_url, "ray-train", direct_reads=True, batch_size=2).take_all()
    # every entry of the snapshot once (in the order Ray's tasks finish: Ray Data keeps no order unless asked)
    assert sorted(row["content_hash"] for row in rows) == sorted(m.content_hash for m in snapshot)
    with FeatureClient(s3_url) as client:
        read = [to_sample(features) for features in client.get_many([m.feature_key() for m in snapshot])]
    samples = {sample["content_hash"]: sample for sample in read}
    for row in rows:
        sample = samples[row["content_hash"]]
        assert row["hidden_dtype"] == "bfloat16"
        hidden = torch.tensor(row["hidden_states"]).view(torch.bfloat16)  # Ray hands out read-only arrays: a copy
        assert torch.equal(hidden, sample["hidden_states"])
        assert torch.equal(torch.tensor(row["input_ids"]), sample["input_ids"])

    # as Ray Train shards a dataset over its workers (`get_dataset_shard` is a streaming split): every entry once
    # (its shards are read at once, one per worker, as a trainer's workers read them)
    shards = read_features(s3_url, "ray-train", batch_size=2).streaming_split(2, equal=False)
    with ThreadPoolExecutor(2) as workers:
        split = workers.map(lambda shard: [row["content_hash"] for row in shard.iter_rows()], shards)
        assert sorted(chain.from_iterable(split)) == sorted(m.content_hash for m in snapshot)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RayDeprecationWarning)  # the guide's recipe uses no deprecated Ray API
        batches = list(
            read_features(s3_url, "ray-train", batch_size=2).iter_torch_batches(batch_size=5, collate_fn=pad_features)
        )
    (batch,) = batches
    expected = pad_collate([samples[content_hash] for content_hash in batch["content_hash"]])
    assert set(batch) == set(expected)
    for name, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(batch[name], value), name
        else:
            assert batch[name] == value, name


def test_a_listing_reads_too_and_a_changed_byte_in_the_bucket_is_refused(
    s3_url: str, snapshot: list[Manifest], bucket: Bucket
) -> None:
    listed = read_features(s3_url, featureset=snapshot[0].featureset_id, direct_reads=True).take_all()
    assert sorted(row["content_hash"] for row in listed) == sorted(m.content_hash for m in snapshot)

    hexdigest = snapshot[3].content_hash.removeprefix("sha256:")
    path = f"features/blobs/{hexdigest[:2]}/{hexdigest}/hidden_states/c/0/0/0"
    store = bucket.obstore()
    shard = bytearray(bytes(obstore.get(store, path).bytes()))
    shard[len(shard) // 3] ^= 0x10
    obstore.put(store, path, bytes(shard))
    with pytest.raises(ray.exceptions.RayTaskError) as refused:
        read_features(s3_url, "ray-train", direct_reads=True).take_all()
    # the bytes' check refused them (its error crosses Ray's process boundary as text), not a Ray fault
    told = "".join(traceback.format_exception(refused.value))
    assert "IntegrityError: hidden_states: chunk" in told, told[-2000:]


def test_a_store_on_the_services_own_disk_is_read_through_the_service_unless_direct_reads_are_insisted_on(
    live_url: str,
) -> None:
    """A single host's store (local disk): the default reads through the service; `direct_reads=True` is refused in
    one line before Ray runs anything."""
    with FeatureClient(live_url) as client:
        written = [r.manifest for r in client.extract([{"text": "def local(): pass"}, {"text": "x = 1"}]).results]
        client.create_dataset("laptop", [m.feature_key() for m in written])
    rows = read_features(live_url, "laptop").take_all()
    assert sorted(row["content_hash"] for row in rows) == sorted(m.content_hash for m in written)
    with pytest.raises(DirectReadsUnavailableError, match=r"^read_features\(direct_reads=True\): .*own disk"):
        read_features(live_url, "laptop", direct_reads=True)


def test_as_many_actors_as_cpus_read_every_entry_and_one_more_is_refused_in_one_line(live_url: str) -> None:
    """On the 2-CPU cluster, 2 actors (each holding a CPU) read the snapshot to `iter_torch_batches` and to two
    consumers of `streaming_split(2)`, within a bound (a snapshot's positions are blocks in the object store, not a
    read task waiting for a CPU: with `ray.data.range` this never ran); 3 actors are refused before Ray runs."""
    with FeatureClient(live_url) as client:
        samples = [{"text": f"def actor_{i}(): return {i}"} for i in range(6)]
        written = [r.manifest for r in client.extract(samples).results]
        client.create_dataset("two-actors", [m.feature_key() for m in written])
    expected = sorted(m.content_hash for m in written)

    def batched() -> list[str]:
        source = read_features(live_url, "two-actors", direct_reads=False, actors=2, batch_size=2)
        batches = source.iter_torch_batches(batch_size=4, collate_fn=pad_features)
        return [content_hash for batch in batches for content_hash in batch["content_hash"]]

    def split() -> list[str]:
        shards = read_features(live_url, "two-actors", direct_reads=False, actors=2, batch_size=2).streaming_split(2)
        with ThreadPoolExecutor(2) as consumers:
            parts = consumers.map(lambda shard: [row["content_hash"] for row in shard.iter_rows()], shards)
            return list(chain.from_iterable(parts))

    runner = ThreadPoolExecutor(1)  # a hang fails the test at the bound, rather than holding it forever
    try:
        for read in (batched, split):
            assert sorted(runner.submit(read).result(timeout=180)) == expected, read.__name__
    finally:
        runner.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(
        PoolDoesNotFit,
        match=r"^the actor pool cannot be placed: 3 actors of 1 CPU need 3 CPUs and the cluster has 2: pass actors=2$",
    ):
        read_features(live_url, "two-actors", actors=3)


def test_rows_come_in_batches_of_similar_lengths_when_asked(live_url: str) -> None:
    """`bucket_batch=2`: the snapshot's entries in the epoch's batches of similar token counts, in their order, so
    `iter_torch_batches(batch_size=2)` pads each pair to little more than its own entries."""
    with FeatureClient(live_url) as client:
        samples = [{"text": "token " * (2 + (i * 11) % 40)} for i in range(8)]
        written = [r.manifest for r in client.extract(samples).results]
        client.create_dataset("by-length", [m.feature_key() for m in written])
    lengths = [m.num_tokens for m in written]
    source = read_features(live_url, "by-length", actors=2, batch_size=2, bucket_batch=2, seed=5)
    got = [
        batch["attention_mask"].sum(dim=1).tolist()
        for batch in source.iter_torch_batches(batch_size=2, collate_fn=pad_features)
    ]
    assert got == [[lengths[p] for p in batch] for batch in bucketed_batches(lengths, 2, seed=5)]
