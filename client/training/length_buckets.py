"""Batches of similar lengths, so a padded batch is mostly tokens: an epoch's entries drawn in a seeded random order,
taken `window` batches' worth at a time, sorted by token count within that window and cut into batches, the batches
then shuffled (seeded). Every entry comes once an epoch; one seed and epoch give one order on every rank; the window
trades padding for randomness (a window of one batch is a plain shuffle).

SpecForge measured +17% to +24% supervised positions a second from batches bucketed by length; here the padding
share on the short (128–2,048 tokens) and long (256–8,192) mixes goes from 41–45% to 1.2–1.4% at batches of 8 and 16
(`benchmarks/length_buckets.py`, `benchmarks/results/length-buckets-cpu.json`). Every source a trainer reads takes
it: `EntryStream(..., bucket_batch=8)`, `LengthBatches` for a `FeatureDataset`, `read_features(..., bucket_batch=8)`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

WINDOW = 64  # batches sorted together


def bucketed_batches(
    lengths: Sequence[int] | np.ndarray, batch_size: int, seed: int, epoch: int = 0, window: int = WINDOW
) -> list[list[int]]:
    """The epoch's batches of positions into `lengths`, each of similar token counts (the last may be short)."""
    if batch_size < 1 or window < 1:
        raise ValueError("batch_size and window are at least 1")
    tokens = np.asarray(lengths, dtype=np.int64)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(tokens))
    span = batch_size * window
    batches: list[np.ndarray] = []
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        chunk = chunk[np.argsort(tokens[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i].tolist() for i in rng.permutation(len(batches))]


def batch_count(count: int, batch_size: int, window: int = WINDOW) -> int:
    """How many batches `bucketed_batches` cuts `count` entries into (each window's last batch may be short)."""
    full, rest = divmod(count, batch_size * window)
    return full * window + -(-rest // batch_size)


def sharded(batches: list[list[int]], shard: int, shards: int) -> list[int]:
    """This shard's positions: whole batches (batch b goes to shard b mod shards), so each shard's stream, read
    `batch_size` at a time, is made of buckets."""
    return [position for batch in batches[shard::shards] for position in batch]


def padding_share(lengths: Sequence[int] | np.ndarray, batches: Sequence[Sequence[int]]) -> float:
    """Of the positions the batches take when each is right-padded to its longest, the share that is padding."""
    tokens = np.asarray(lengths, dtype=np.int64)
    padded = sum(int(tokens[list(batch)].max()) * len(batch) for batch in batches if len(batch))
    return 1 - int(tokens.sum()) / padded if padded else 0.0


class LengthBatches(Sampler[list[int]]):
    """A batch sampler for a map-style dataset (`DataLoader(dataset, batch_sampler=LengthBatches(...))`): its
    entries' token counts (a `FeatureDataset`'s manifests carry them: `num_tokens`), bucketed per epoch
    (`set_epoch`, as with DistributedSampler), this rank's whole batches of them."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int = 0,
        *,
        window: int = WINDOW,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.lengths, self.batch_size, self.seed, self.window = list(lengths), batch_size, seed, window
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _mine(self) -> list[list[int]]:
        batches = bucketed_batches(self.lengths, self.batch_size, self.seed, self.epoch, self.window)
        return batches[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._mine())

    def __len__(self) -> int:  # counted, not cut: a DataLoader asks it apart from iterating
        return len(range(self.rank, batch_count(len(self.lengths), self.batch_size, self.window), self.world_size))
