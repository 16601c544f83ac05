"""Batches bucketed by length (#62, client/training/length_buckets.py): every entry once an epoch, one order per seed
and epoch on every rank, batches of similar token counts, padding cut to a few percent on the short and long mixes;
and every source a trainer reads gives them: a `FeatureDataset` through `LengthBatches`, an `EntryStream` of a
snapshot or a listing with `bucket_batch` (whole batches per rank), against a real server of the tiny model."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from torch.utils.data import DataLoader

from client import FeatureClient
from client.training.collate import pad_collate
from client.training.entry_stream import EntryStream
from client.training.length_buckets import LengthBatches, bucketed_batches, padding_share, sharded
from client.training.torch_data import FeatureDataset
from schemas.manifest import Manifest

MIXES = {"short": (128, 2048), "long": (256, 8192)}


def _mix(name: str, count: int = 4000) -> list[int]:
    low, high = MIXES[name]
    rng = random.Random(name)
    return [rng.randint(low, high) for _ in range(count)]


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("batch_size", [4, 8, 16])
def test_every_entry_once_in_batches_of_similar_lengths(mix: str, batch_size: int) -> None:
    lengths = _mix(mix)
    batches = bucketed_batches(lengths, batch_size, seed=3, epoch=1)
    assert sorted(p for batch in batches for p in batch) == list(range(len(lengths)))
    assert sum(len(batch) < batch_size for batch in batches) <= -(-len(lengths) // (batch_size * 64))
    plain = [list(range(i, min(i + batch_size, len(lengths)))) for i in range(0, len(lengths), batch_size)]
    assert padding_share(lengths, plain) > 0.25  # right-padded as they come: a quarter or more is padding
    assert padding_share(lengths, batches) <= 0.05  # the goal
    assert batches == bucketed_batches(lengths, batch_size, seed=3, epoch=1)  # one order per seed and epoch
    assert batches != bucketed_batches(lengths, batch_size, seed=3, epoch=2)
    shards = [sharded(batches, shard, 3) for shard in range(3)]
    assert sorted(p for shard in shards for p in shard) == list(range(len(lengths)))
    assert shards[1][:batch_size] == batches[1]  # whole batches each


@pytest.fixture
def varied(client: FeatureClient) -> list[Manifest]:
    """Twelve entries of 3 to 60-odd tokens, and a snapshot of them."""
    samples = [{"text": "word " * (3 + (i * 7) % 60)} for i in range(12)]
    written = [r.manifest for r in client.extract(samples).results]
    client.create_dataset("varied", [m.feature_key() for m in written])
    return written


@pytest.mark.parametrize(("count", "rank", "world"), [(4000, 0, 1), (4000, 1, 3), (1000, 2, 3), (7, 0, 2), (0, 0, 1)])
def test_a_length_sampler_counts_the_batches_it_gives(count: int, rank: int, world: int) -> None:
    sampler = LengthBatches(_mix("short")[:count], batch_size=8, seed=1, rank=rank, world_size=world)
    assert len(sampler) == len(list(sampler))  # counted without cutting the epoch


def _lengths(batches: Iterator[dict]) -> list[list[int]]:
    return [batch["attention_mask"].sum(dim=1).tolist() for batch in batches]


def _spread(batch: list[int]) -> int:
    return max(batch) - min(batch)


def test_a_feature_dataset_batched_by_length(live_url: str, varied: list[Manifest]) -> None:
    dataset = FeatureDataset(live_url, varied)
    sampler = LengthBatches([m.num_tokens for m in varied], batch_size=3, seed=0, window=4)
    got = _lengths(iter(DataLoader(dataset, batch_sampler=sampler, collate_fn=pad_collate)))
    assert sorted(n for batch in got for n in batch) == sorted(m.num_tokens for m in varied)
    plain = _lengths(iter(DataLoader(dataset, batch_size=3, collate_fn=pad_collate)))
    assert sum(map(_spread, got)) < sum(map(_spread, plain))  # similar lengths in a batch
    sampler.set_epoch(1)  # another epoch, another order of the batches
    assert _lengths(iter(DataLoader(dataset, batch_sampler=sampler, collate_fn=pad_collate))) != got


@pytest.mark.parametrize("source", ["snapshot", "listing"])
def test_an_entry_stream_gives_each_rank_whole_batches_of_similar_lengths(
    live_url: str, client: FeatureClient, varied: list[Manifest], source: str
) -> None:
    def stream(rank: int, bucket_batch: int | None = 2) -> EntryStream:
        reading = {"seed": 5, "bucket_batch": bucket_batch, "rank": rank, "world_size": 2}
        if source == "snapshot":
            return EntryStream.of_dataset(live_url, "varied", **reading)
        return EntryStream.listing(live_url, **reading)

    def read(rank: int, bucket_batch: int | None = 2) -> list[list[int]]:
        return _lengths(iter(DataLoader(stream(rank, bucket_batch), batch_size=2, collate_fn=pad_collate)))

    # the source's own order of token counts: what the buckets are drawn over
    listed = [m.num_tokens for m in varied] if source == "snapshot" else None
    lengths = listed or [key.num_tokens for key in client.keys(page_size=100)]
    expected = bucketed_batches(lengths, 2, seed=5)
    per_rank = [read(0), read(1)]
    # each rank: whole batches, batch b of the epoch's to rank b mod 2 (a batch's entries in the order it holds them)
    wanted = [[sorted(lengths[p] for p in batch) for batch in expected[rank::2]] for rank in (0, 1)]
    assert [[sorted(batch) for batch in batches] for batches in per_rank] == wanted
    plain = [read(0, None), read(1, None)]
    assert sum(_spread(b) for r in per_rank for b in r) < sum(_spread(b) for r in plain for b in r)
    with pytest.raises(ValueError, match="needs token counts"):
        EntryStream.of_samples(live_url, [{"text": "x"}], [1], bucket_batch=2)
