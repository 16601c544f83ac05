"""torch integration: a map-style Dataset over keys, an IterableDataset over an entry listing (sharded across
DataLoader workers and ranks, prefetched), and collate functions that pad or pack variable lengths.

Each worker process opens its own FeatureClient (an httpx client does not survive a fork); every sample is verified
against its hash before it is yielded, and with `cache_dir` a second epoch is served from disk without any request.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from client.cache import FeatureCache
from client.chunk_checks import DeferredCopy
from client.client import FeatureClient
from client.errors import StoreUnavailableError
from client.features import Features
from client.host_memory import HOST_MEMORY
from client.keys import KeyLike, batch_item
from schemas.api import BatchItem
from schemas.featureset import LayerId
from schemas.manifest import HIDDEN_SCALES, HIDDEN_STATES, Manifest
from schemas.tensors import DTYPES
from schemas.torch_tensors import TORCH_DTYPES

Sample = dict[str, Any]


def to_sample(features: Features, dequantise: bool = True, hidden: DeferredCopy | None = None) -> Sample:
    """A training sample. An fp8 featureset's hidden states are dequantised to bfloat16 here unless `dequantise` is
    False: then `hidden_states` is the float8 as stored and `hidden_scales` its scales [T, L] (half the bytes to
    move; `DeviceFeed` dequantises them on the GPU). `hidden`: the hidden states as a `DeferredCopy`
    (`fetch_sample`)."""
    if hidden is not None:
        sample: Sample = {"hidden_states": hidden}
    elif not dequantise and HIDDEN_SCALES in features.tensors:
        hidden, scales = features.fp8
        sample = {"hidden_states": hidden, "hidden_scales": scales}
    else:
        sample = {"hidden_states": features.hidden_states}
    sample |= {
        "input_ids": features.input_ids,
        "prompt_hash": features.manifest.prompt_hash,
        "content_hash": features.content_hash,
    }
    if features.loss_mask is not None:
        sample["loss_mask"] = features.loss_mask
    if features.target_ids is not None:
        sample["target_ids"] = features.target_ids
    if (teacher := features.teacher) is not None:
        sample.update(topk_ids=teacher.ids, topk_logprobs=teacher.logprobs, topk_mass=teacher.mass)
    return sample


def fetch_sample(client: FeatureClient, key: Manifest | KeyLike) -> Sample:
    """`to_sample(client.fetch(key))` for `pad_collate`, except that a whole bfloat16 entry's hidden_states come as
    a `DeferredCopy`, whose chunks `pad_collate` checks against their write-time digests as it copies them into the
    batch: from the client's cache one pass over the features instead of a check and then a copy, from the service
    each chunk decoded straight into the batch instead of into an array of its own and then copied (the host's
    memory bandwidth is what bounds a batch's way to the GPU). Only `pad_collate` turns such a sample into tensors."""
    item = key_of(key)
    if item.layers is None and item.tokens is None:
        features, copy = client.fetch_for_copy(item.key, HIDDEN_STATES)
        return to_sample(features, hidden=copy)
    return to_sample(client.fetch(item.key, item.layers, item.tokens))


def key_of(item: Manifest | KeyLike) -> BatchItem:
    """A fetch key; a manifest pins its version by content hash, which is what lets the cache answer alone."""
    return batch_item(item.feature_key() if isinstance(item, Manifest) else item)


class _ClientPerProcess:
    def __init__(self, base_url: str, token: str | None, cache_dir: str | Path | None, cache_bytes: int) -> None:
        self.base_url, self.token, self.cache_dir, self.cache_bytes = base_url, token, cache_dir, cache_bytes
        self._client: FeatureClient | None = None
        self._pid = -1

    def get(self) -> FeatureClient:
        if self._client is None or self._pid != os.getpid():
            cache = FeatureCache(self.cache_dir, self.cache_bytes) if self.cache_dir is not None else None
            self._client = FeatureClient(self.base_url, self.token, cache=cache)
            self._pid = os.getpid()
        return self._client

    def __getstate__(self) -> dict[str, Any]:  # workers build their own client
        return {**self.__dict__, "_client": None, "_pid": -1}


class FeatureDataset(Dataset[Sample]):
    """Map-style: item i is the features of `keys[i]` (a manifest, or a dict of `FeatureClient.get` arguments)."""

    def __init__(
        self,
        base_url: str,
        keys: Sequence[Manifest | KeyLike],
        *,
        token: str | None = None,
        layers: Sequence[LayerId] | None = None,
        cache_dir: str | Path | None = None,
        cache_bytes: int = 64 * 1024**3,
        dequantise: bool = True,
    ) -> None:
        """`dequantise=False`: fp8 featuresets come as stored (see `to_sample`), for `DeviceFeed` to dequantise."""
        self.keys = [key_of(k) for k in keys]
        self.layers = list(layers) if layers is not None else None
        self.dequantise = dequantise
        self._clients = _ClientPerProcess(base_url, token, cache_dir, cache_bytes)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> Sample:
        item = self.keys[index]
        client = self._clients.get()
        return to_sample(retrying(client.fetch, item.key, self.layers or item.layers, item.tokens), self.dequantise)


class EntryStream(IterableDataset[Sample]):
    """Every entry of a listing once per epoch, split across DataLoader workers (and ranks) by position, fetched
    `prefetch` at a time ahead of the consumer.

    With `seed`, each epoch visits the whole listing in a seeded random order: every rank and worker computes the
    same permutation of the listing (from the seed and the epoch, `set_epoch`) and takes its own positions of it,
    so the ranks' shares are disjoint, cover the listing, and change from epoch to epoch; without a seed, the order
    of the listing. Only the keys are held (about 300 bytes an entry), never the features beyond `prefetch`."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset: str | None = None,
        since: str | None = None,
        prefetch: int = 4,
        cache_dir: str | Path | None = None,
        cache_bytes: int = 64 * 1024**3,
        rank: int = 0,
        world_size: int = 1,
        seed: int | None = None,
        dequantise: bool = True,
        dataset: str | None = None,
    ) -> None:
        """`dataset`: a dataset id or name (`FeatureClient.create_dataset`) instead of the listing's filters: each
        process reads its index once (a dataset id, from the cache directory when it is there) and takes its share
        of it, in the dataset's order or the seed's."""
        if dataset is not None and any(v is not None for v in (backend, model_revision, featureset, since)):
            raise ValueError("give a dataset or listing filters, not both")
        self.dataset = dataset
        self.dequantise = dequantise
        self.filters = {"backend": backend, "model_revision": model_revision, "featureset": featureset, "since": since}
        self.prefetch = prefetch
        self.rank, self.world_size = rank, world_size
        self.seed = seed
        self.epoch = 0
        self._clients = _ClientPerProcess(base_url, token, cache_dir, cache_bytes)

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration follows (call it on every rank, as with DistributedSampler)."""
        self.epoch = epoch

    def order(self, keys: list[BatchItem]) -> list[BatchItem]:
        """The epoch's order of the whole listing: the same on every rank for one seed and epoch."""
        if self.seed is None:
            return keys
        return [keys[i] for i in self._permutation(len(keys))]

    def _permutation(self, count: int) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(count)

    def __iter__(self) -> Iterator[Sample]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shard, shards = self.rank * workers + worker, self.world_size * workers
        client = self._clients.get()
        if self.dataset is not None:
            index = client.dataset(self.dataset)
            positions = np.arange(len(index)) if self.seed is None else self._permutation(len(index))
            mine: Iterator[BatchItem] = (batch_item(index.key(int(p))) for p in positions[shard::shards])
            yield from self._fetched(client, mine)
            return
        listing = client.entries(**self.filters)
        if self.seed is None:
            mine = (key_of(m) for i, m in enumerate(listing) if i % shards == shard)
        else:  # the whole listing's keys first: a global order needs all of them
            everything = self.order([key_of(m) for m in listing])
            mine = iter(everything[shard::shards])
        yield from self._fetched(client, mine)

    def _fetched(self, client: FeatureClient, mine: Iterator[BatchItem]) -> Iterator[Sample]:
        with ThreadPoolExecutor(self.prefetch, thread_name_prefix="hsstore-prefetch") as pool:
            pending: deque[Future[Features]] = deque()
            for key in mine:
                pending.append(pool.submit(retrying, client.fetch, key.key))
                if len(pending) >= self.prefetch:
                    yield to_sample(pending.popleft().result(), self.dequantise)
            while pending:
                yield to_sample(pending.popleft().result(), self.dequantise)


RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # an outage of the service's object store up to ~15 s costs only time


def retrying(fetch: Callable[..., Features], *args: Any) -> Features:
    """`fetch(*args)`, again after a pause while the service says its store is unavailable (a 503 it means to
    clear); any other error, and the last of these, goes to the training loop."""
    for delay in RETRY_DELAYS_S:
        try:
            return fetch(*args)
        except StoreUnavailableError:
            time.sleep(delay)
    return fetch(*args)


_PER_TOKEN = ("hidden_scales", "loss_mask", "target_ids", "topk_ids", "topk_logprobs", "topk_mass")


def _collated_dtype(values: torch.Tensor) -> torch.dtype:
    """Ids and masks batch as int64 (what embedding lookups and losses take), probabilities keep their float32."""
    return values.dtype if values.is_floating_point() else torch.long


def _per_token(samples: list[Sample], name: str) -> list[torch.Tensor] | None:
    """Each sample's `name` tensor, or None when no sample has one.

    `loss_mask` convention: an entry without one (no completion: every token is the prompt) trains on every token,
    so in a batch where some entries have a mask, the others get all ones; a batch where none has one carries no
    mask, which means the same. `target_ids` and the teacher's `topk_*` come from the featureset: a batch mixing
    entries with and without them is refused rather than filled with made-up targets."""
    present = [name in s for s in samples]
    if not any(present):
        return None
    if all(present):
        return [s[name] for s in samples]
    if name == "loss_mask":
        return [s[name] if name in s else torch.ones_like(s["input_ids"], dtype=torch.uint8) for s in samples]
    missing = [s["content_hash"] for s in samples if name not in s]
    raise ValueError(f"{len(missing)} of {len(samples)} entries lack {name} (e.g. {missing[0]}): batch one featureset")


def pad_collate(samples: list[Sample], pin_memory: bool = False, recycle: bool = True) -> dict[str, Any]:
    """Right-pad to the longest: hidden_states [B, T, L, H], input_ids/loss_mask/target_ids [B, T], attention_mask,
    and for a top-k featureset topk_ids/topk_logprobs [B, T, k] and topk_mass [B, T]; an fp8 featureset read with
    `dequantise=False` has float8 hidden_states and hidden_scales [B, T, L]. Pads are 0 everywhere
    (loss_mask 0 and attention_mask False on pads); see `_per_token` for the loss_mask of entries without one.

    `pin_memory`: the batch is collated straight into pinned memory (torch's caching host allocator, so its pages
    are reused from batch to batch, not faulted in afresh), from which `DeviceFeed` copies it to the GPU as it is:
    one copy of the features on the host instead of a collate and then a staging copy. Needs CUDA; use it in
    threads, not in a DataLoader's worker processes (pinned memory does not cross processes).

    `recycle`: otherwise the hidden states land in memory of an earlier batch that nothing refers to any more
    (`client.host_memory`), not in fresh pages the kernel faults in and zeroes first."""
    lengths = [s["input_ids"].shape[0] for s in samples]
    longest = max(lengths)
    first = samples[0]["hidden_states"]
    dtype = TORCH_DTYPES[first.dtype] if isinstance(first, DeferredCopy) else first.dtype
    # not zeros: zero-filling the whole batch costs a pass over it (torch.zeros ran at 1.4 GB/s per core on the GPU
    # host, half the loader's time); only the pads are zeroed, below
    hidden = _batch_memory((len(samples), longest, *first.shape[1:]), dtype, pin_memory, recycle)
    batch: dict[str, Any] = {
        "hidden_states": hidden,
        "input_ids": torch.zeros((len(samples), longest), dtype=torch.long, pin_memory=pin_memory),
        "attention_mask": torch.zeros((len(samples), longest), dtype=torch.bool, pin_memory=pin_memory),
        "lengths": torch.tensor(lengths),
        "content_hash": [s["content_hash"] for s in samples],
    }
    per_token = {name: values for name in _PER_TOKEN if (values := _per_token(samples, name))}
    for name, values in per_token.items():
        shape, dtype = (len(samples), longest, *values[0].shape[1:]), _collated_dtype(values[0])
        batch[name] = torch.zeros(shape, dtype=dtype, pin_memory=pin_memory)
    copying: list[tuple[DeferredCopy, list]] = []
    for row, (sample, length) in enumerate(zip(samples, lengths, strict=True)):
        source = sample["hidden_states"]
        if isinstance(source, DeferredCopy):  # checked chunk by chunk as it lands, on the decode pool
            out = hidden[row, :length].view(torch.uint8).numpy().view(DTYPES[source.dtype][1])
            copying.append((source, source.start_copy(out.reshape(source.shape))))
        else:
            hidden[row, :length] = source
        hidden[row, length:] = 0
        batch["input_ids"][row, :length] = sample["input_ids"]
        batch["attention_mask"][row, :length] = True
        for name, values in per_token.items():
            batch[name][row, :length] = values[row]
    for source, checks in copying:
        source.finish(checks)
    return batch


def _batch_memory(shape: tuple[int, ...], dtype: torch.dtype, pin_memory: bool, recycle: bool) -> torch.Tensor:
    if pin_memory or not recycle:
        return torch.empty(shape, dtype=dtype, pin_memory=pin_memory)
    nbytes = math.prod(shape) * dtype.itemsize
    return torch.from_numpy(HOST_MEMORY.take(nbytes)).view(dtype).view(shape)


def pack_collate(samples: list[Sample]) -> dict[str, Any]:
    """Concatenate along tokens (no padding): hidden_states [N, L, H], input_ids [N], position_ids restarting at
    every sequence, cu_seqlens [B+1] int32 for varlen attention kernels; loss_mask as in `pad_collate`."""
    lengths = [s["input_ids"].shape[0] for s in samples]
    batch: dict[str, Any] = {
        "hidden_states": torch.cat([s["hidden_states"] for s in samples]),
        "input_ids": torch.cat([s["input_ids"].long() for s in samples]),
        "position_ids": torch.cat([torch.arange(n) for n in lengths]),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32),
        "content_hash": [s["content_hash"] for s in samples],
    }
    for name in _PER_TOKEN:
        if (values := _per_token(samples, name)) is not None:
            batch[name] = torch.cat([v.to(_collated_dtype(v)) for v in values])
    return batch
