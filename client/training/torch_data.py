"""torch integration: training samples and a map-style Dataset over keys (the streamed one over a listing, a
dataset or samples: `entry_stream.py`); `client.training.collate` makes batches of them.

Each worker process opens its own FeatureClient (an httpx client does not survive a fork); every sample is verified
against its hash before it is yielded, and with `cache_dir` a second epoch is served from disk without any request.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from torch.utils.data import Dataset

from client.cache import FeatureCache
from client.chunk_checks import DeferredCopy
from client.client import FeatureClient
from client.errors import StoreUnavailableError
from client.features import Features
from client.keys import KeyLike, batch_item
from client.training.cache_through import OnMissing, SampleReads
from client.training.collate import Sample
from schemas.api import FeatureRead
from schemas.featureset import FeatureSet, LayerId
from schemas.manifest import HIDDEN_SCALES, HIDDEN_STATES, Manifest


def to_sample(features: Features, dequantise: bool = True, hidden: DeferredCopy | None = None) -> Sample:
    """A training sample. An fp8 featureset's hidden states are dequantised to bfloat16 here unless `dequantise` is
    False: then `hidden_states` is the float8 as stored and `hidden_scales` its scales [T, L] (half the bytes to
    move; `DeviceFeed` dequantises them on the GPU). `hidden`: the hidden states as a `DeferredCopy`
    (`fetch_sample`)."""
    if hidden is not None:
        sample: Sample = {"hidden_states": hidden}
    elif not dequantise and HIDDEN_SCALES in features.tensors:
        stored, scales = features.fp8
        sample = {"hidden_states": stored, "hidden_scales": scales}
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


def key_of(item: Manifest | KeyLike) -> FeatureRead:
    """A fetch key; a manifest pins its version by content hash, which is what lets the cache answer alone."""
    return batch_item(item.feature_key() if isinstance(item, Manifest) else item)


class ClientPerProcess:
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
    """Map-style: item i is the features of `keys[i]` (a manifest, or a dict of `FeatureClient.get` arguments), or
    of `samples[i]` (prompts, read as `featureset` from `backend`)."""

    def __init__(
        self,
        base_url: str,
        keys: Sequence[Manifest | KeyLike] | None = None,
        *,
        samples: Sequence[Mapping[str, Any]] | None = None,
        featureset: FeatureSet | Sequence[LayerId] | None = None,
        backend: str | None = None,
        on_missing: OnMissing = "error",
        priority: int = 10,
        token: str | None = None,
        layers: Sequence[LayerId] | None = None,
        cache_dir: str | Path | None = None,
        cache_bytes: int = 64 * 1024**3,
        dequantise: bool = True,
    ) -> None:
        """`dequantise=False`: fp8 featuresets come as stored (see `to_sample`), for `DeviceFeed` to dequantise.

        `on_missing` (with `samples`): "error", a sample not stored is a NotFoundError; "extract", what is missing
        is submitted now as one warm job of `priority` (`client.training.cache_through`), and a read of a sample it
        has not stored yet waits for it; "wait", a read waits for another process's job (on several ranks, let rank 0
        extract and the others wait)."""
        if (keys is None) == (samples is None):
            raise ValueError("give keys or samples")
        self.layers = list(layers) if layers is not None else None
        self.dequantise = dequantise
        self._clients = ClientPerProcess(base_url, token, cache_dir, cache_bytes)
        self._reads: SampleReads | None = None
        if samples is not None:
            self._reads = SampleReads(self._clients.get(), samples, featureset, backend, on_missing, priority)
            keys = self._reads.keys
        self.keys = [key_of(k) for k in keys or []]

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> Sample:
        item = self.keys[index]
        client = self._clients.get()

        def fetch() -> Features:
            return retrying(client.fetch, item.key, self.layers or item.layers, item.tokens)

        features = self._reads.read(client, index, fetch) if self._reads is not None else fetch()
        return to_sample(features, self.dequantise)


T = TypeVar("T")
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # an outage of the service's object store up to ~15 s costs only time


def retrying(fetch: Callable[..., T], *args: Any) -> T:
    """`fetch(*args)`, again after a pause while the service says its store is unavailable (a 503 it means to
    clear); any other error, and the last of these, goes to the training loop."""
    for delay in RETRY_DELAYS_S:
        try:
            return fetch(*args)
        except StoreUnavailableError:
            time.sleep(delay)
    return fetch(*args)
