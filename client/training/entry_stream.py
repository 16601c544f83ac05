"""An IterableDataset over the store's entries (a listing, a dataset snapshot or samples read cache-through),
sharded across DataLoader workers and ranks, prefetched, in a seeded order per epoch that every rank computes alike."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from client.client import FeatureClient
from client.features import Features
from client.keys import batch_item
from client.training.cache_through import OnMissing, SampleReads
from client.training.collate import Sample
from client.training.length_buckets import bucketed_batches, sharded
from client.training.torch_data import ClientPerProcess, key_of, retrying, to_sample
from schemas.api import FeatureRead
from schemas.featureset import FeatureSet, LayerId
from schemas.keys import EntryFilters


class Reading(TypedDict, total=False):
    """How an `EntryStream` reads, whatever its source: the service's token, features fetched `prefetch` at a time
    into a shared disk cache, this process's share (`rank` of `world_size`), the epochs' order (`seed`), fp8
    entries dequantised to bfloat16 or not, and batches of similar lengths (`bucket_batch`)."""

    token: str | None
    prefetch: int
    cache_dir: str | Path | None
    cache_bytes: int
    rank: int
    world_size: int
    seed: int | None
    dequantise: bool
    bucket_batch: int | None


class EntryStream(IterableDataset[Sample]):
    """Entries once per epoch, split across DataLoader workers (and ranks) by position, fetched `prefetch` at a time
    ahead of the consumer. One constructor per source, each taking the `Reading` options:

        EntryStream(url)                                     every entry the store lists
        EntryStream.listing(url, backend=..., since=...)     the listing, filtered
        EntryStream.of_dataset(url, dataset)                 a dataset snapshot (`FeatureClient.create_dataset`)
        EntryStream.of_samples(url, samples, featureset)     prompts, read (or extracted first) as `featureset`

    With `seed`, each epoch visits the whole source in a seeded random order: every rank and worker computes the
    same permutation (from the seed and the epoch, `set_epoch`) and takes its own positions of it, so the ranks'
    shares are disjoint, cover the source, and change from epoch to epoch; without a seed, the source's order. Only
    the keys are held (about 300 bytes an entry), never the features beyond `prefetch`.

    With `bucket_batch=B` (a listing or a snapshot, whose token counts are known before a read), each epoch is cut
    into batches of B entries of similar lengths (client/training/length_buckets.py; seeded, `seed` or 0) and every
    worker and rank takes whole batches: a DataLoader of `batch_size=B` then pads each batch to little more than its
    own entries."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        prefetch: int = 4,
        cache_dir: str | Path | None = None,
        cache_bytes: int = 64 * 1024**3,
        rank: int = 0,
        world_size: int = 1,
        seed: int | None = None,
        dequantise: bool = True,
        bucket_batch: int | None = None,
    ) -> None:
        """Every entry the store lists (the other sources: the constructors below)."""
        if bucket_batch is not None and bucket_batch < 1:
            raise ValueError("bucket_batch is a batch size: at least 1")
        self.bucket_batch = bucket_batch
        self.dataset: str | None = None
        self.filters = EntryFilters()
        self.dequantise = dequantise
        self.prefetch = prefetch
        self.rank, self.world_size = rank, world_size
        self.seed = seed
        self.epoch = 0
        self._clients = ClientPerProcess(base_url, token, cache_dir, cache_bytes)
        self._reads: SampleReads | None = None

    @classmethod
    def listing(
        cls,
        base_url: str,
        *,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset_id: str | None = None,
        since: str | None = None,
        **reading: Unpack[Reading],
    ) -> EntryStream:
        """The listing's entries that match every filter given (`since`: ISO-8601, or an age such as 7d)."""
        stream = cls(base_url, **reading)
        stream.filters = EntryFilters(
            backend=backend, model_revision=model_revision, featureset=featureset_id, since=since
        )
        return stream

    @classmethod
    def of_dataset(cls, base_url: str, dataset: str, **reading: Unpack[Reading]) -> EntryStream:
        """A dataset snapshot's entries, by its id or name: each process reads its index once (a dataset id, from
        the cache directory when it is there) and takes its share of it, in the dataset's order or the seed's."""
        stream = cls(base_url, **reading)
        stream.dataset = dataset
        return stream

    @classmethod
    def of_samples(
        cls,
        base_url: str,
        samples: Sequence[Mapping[str, Any]],
        featureset: FeatureSet | Sequence[LayerId],
        *,
        backend: str | None = None,
        on_missing: OnMissing = "error",
        priority: int = 10,
        **reading: Unpack[Reading],
    ) -> EntryStream:
        """Prompts read as `featureset` (a FeatureSet or its layers) from `backend`, with `on_missing` as
        `FeatureDataset` has it; "extract" submits the missing ones in the first epoch's order, so the job keeps
        ahead of every rank's reads."""
        stream = cls(base_url, **reading)
        if stream.bucket_batch is not None:
            raise ValueError("bucket_batch needs token counts before a read: a listing or a snapshot, not samples")
        first = stream._permutation(len(samples)).tolist() if stream.seed is not None else None
        stream._reads = SampleReads(stream._clients.get(), samples, featureset, backend, on_missing, priority, first)
        return stream

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration follows (call it on every rank, as with DistributedSampler)."""
        self.epoch = epoch

    def order(self, keys: list[FeatureRead]) -> list[FeatureRead]:
        """The epoch's order of the whole listing: the same on every rank for one seed and epoch."""
        if self.seed is None:
            return keys
        return [keys[i] for i in self._permutation(len(keys))]

    def _buckets(self, lengths: Sequence[int] | np.ndarray, shard: int, shards: int) -> list[int]:
        """This shard's positions in the epoch's batches of similar lengths, whole batches each."""
        assert self.bucket_batch is not None
        return sharded(bucketed_batches(lengths, self.bucket_batch, self.seed or 0, self.epoch), shard, shards)

    def _permutation(self, count: int) -> np.ndarray:
        assert self.seed is not None  # a permutation is drawn only for a seeded stream
        return np.random.default_rng([self.seed, self.epoch]).permutation(count)

    def __iter__(self) -> Iterator[Sample]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shard, shards = self.rank * workers + worker, self.world_size * workers
        client = self._clients.get()
        if self._reads is not None:
            reads = self._reads
            positions = np.arange(len(reads)) if self.seed is None else self._permutation(len(reads))
            yield from self._fetched(
                partial(reads.read, client, i, partial(_fetch_read, client, reads.keys[i]))
                for i in positions[shard::shards]
            )
            return
        if self.dataset is not None:
            index = client.dataset(self.dataset)
            if self.bucket_batch is not None:
                positions = np.array(self._buckets(index.records["tokens"], shard, shards), dtype=np.int64)
            else:
                everyone = np.arange(len(index)) if self.seed is None else self._permutation(len(index))
                positions = everyone[shard::shards]
            mine: Iterator[FeatureRead] = (batch_item(index.key(int(p))) for p in positions)
            yield from self._fetched(partial(retrying, client.fetch, key.key) for key in mine)
            return
        if self.bucket_batch is not None:  # every key with its tokens first: buckets are of the whole listing
            listed = list(client.keys(**self.filters))
            chosen = self._buckets([entry.num_tokens for entry in listed], shard, shards)
            yield from self._fetched(partial(retrying, client.fetch, listed[i].key()) for i in chosen)
            return
        listing = (listed.key() for listed in client.keys(**self.filters))  # keys alone: no manifest per entry
        if self.seed is None:
            mine = (key_of(m) for i, m in enumerate(listing) if i % shards == shard)
        else:  # the whole listing's keys first: a global order needs all of them
            everything = self.order([key_of(m) for m in listing])
            mine = iter(everything[shard::shards])
        yield from self._fetched(partial(retrying, client.fetch, key.key) for key in mine)

    def _fetched(self, reads: Iterator[Callable[[], Features]]) -> Iterator[Sample]:
        with ThreadPoolExecutor(self.prefetch, thread_name_prefix="hsstore-prefetch") as pool:
            pending: deque[Future[Features]] = deque()
            for read in reads:
                pending.append(pool.submit(read))
                if len(pending) >= self.prefetch:
                    yield to_sample(pending.popleft().result(), self.dequantise)
            while pending:
                yield to_sample(pending.popleft().result(), self.dequantise)


def _fetch_read(client: FeatureClient, item: FeatureRead) -> Features:
    return retrying(client.fetch, item.key, item.layers, item.tokens)
