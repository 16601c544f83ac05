"""Features as a Ray Data source: `read_features(url, dataset)` is a Ray Dataset of a dataset snapshot's (or a
listing's) entries, one row an entry, each read and verified as `FeatureClient` reads it (with `direct_reads`, its
chunks straight from the bucket, each checked against the digest recorded when it was written; a damaged byte fails
the read, never a row). The keys are resolved once, on the driver; the reads run in Ray's tasks, a pool of actors
each holding one client, so Ray Train shards the rows over its workers as it shards any dataset.

Rows come in the order Ray's tasks finish them, as Ray Data does unless asked otherwise
(`DataContext.get_current().execution_options.preserve_order = True` keeps a snapshot's order). A row holds the
entry's tensors as numpy arrays (`hidden_states` [T, L, H] as its bits: bfloat16 as int16, float8 as
uint8, `hidden_dtype` says which), `input_ids`, what the featureset adds, and `prompt_hash` and `content_hash`.
`pad_features` collates a batch of rows as the torch feed does (`pad_collate`):

    import ray
    from client.training.ray_source import pad_features, read_features
    ds = read_features("http://hsstore:8000", "my-train-set", direct_reads=True)
    for batch in ds.iter_torch_batches(batch_size=8, collate_fn=pad_features):
        batch["hidden_states"]   # [8, T, L, H] bfloat16, right-padded; attention_mask, input_ids, ...

`ray` is an optional extra: `pip install 'hsstore[ray]'`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Unpack

import numpy as np
import torch
from ray.data.collate_fn import NumpyBatchCollateFn

from client.client import FeatureClient
from client.errors import DirectReadsUnavailableError
from client.training.collate import Sample, pad_collate
from client.training.length_buckets import bucketed_batches, sharded
from client.training.ray_pools import check_fits, runs_tasks
from client.training.torch_data import to_sample
from schemas.datasets import DatasetIndex
from schemas.keys import EntryFilters, FeatureKey
from schemas.manifest import HIDDEN_STATES

if TYPE_CHECKING:
    import ray.data

_STRINGS = ("prompt_hash", "content_hash")
_POSITION = "data"  # `ray.data.from_numpy`'s column: a snapshot's positions
_LOSS_MASK = "loss_mask"
_BITS = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8}  # dtypes numpy lacks, carried as their bits
_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float8_e4m3fn: "float8_e4m3fn"}
_NAMED_DTYPES = {name: dtype for dtype, name in _DTYPE_NAMES.items()}


class _ReadEntries:
    """One reading actor: a client of its own (an httpx client does not cross processes)."""

    def __init__(self, url: str, token: str | None, direct_reads: bool, index: DatasetIndex | None) -> None:
        self.client = FeatureClient(url, token, direct_reads=direct_reads)
        self.index = index  # a snapshot's: its rows are positions in it

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.index is not None:
            keys = [self.index.key(int(position)) for position in batch[_POSITION]]
        else:
            keys = [FeatureKey.model_validate_json(text) for text in batch["key"]]
        rows = [_row(to_sample(features, dequantise=False)) for features in self.client.get_many(keys)]
        if any(_LOSS_MASK in row for row in rows):  # an entry without one trains on every token (`pad_collate`)
            for row in rows:
                row.setdefault(_LOSS_MASK, np.ones(len(row["input_ids"]), dtype=np.uint8))
        names = dict.fromkeys(name for row in rows for name in row)
        if any(len(row) != len(names) for row in rows):
            raise ValueError("a batch mixes featuresets (some entries lack targets or top-k): read one featureset")
        return {name: _column([row[name] for row in rows]) for name in names}


def _row(sample: Sample) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name, value in sample.items():
        if isinstance(value, torch.Tensor):
            if name == HIDDEN_STATES:
                row["hidden_dtype"] = _DTYPE_NAMES[value.dtype]
            row[name] = value.view(_BITS.get(value.dtype, value.dtype)).numpy()
        else:
            row[name] = value
    return row


def _column(values: list[Any]) -> np.ndarray:
    if isinstance(values[0], np.ndarray):
        column = np.empty(len(values), dtype=object)  # ragged along tokens: Ray keeps them as variable-shaped tensors
        column[:] = values
        return column
    return np.array(values)


def read_features(
    url: str,
    dataset: str | None = None,
    *,
    token: str | None = None,
    direct_reads: bool | None = None,
    actors: int = 1,
    batch_size: int = 16,
    bucket_batch: int | None = None,
    seed: int = 0,
    **listing: Unpack[EntryFilters],
) -> ray.data.Dataset:
    """The entries of `dataset` (a snapshot's id or name: exactly the versions it names), or else of the listing
    `listing` filters as `FeatureClient.entries` takes them, read by `actors` actors `batch_size` entries a call.
    `direct_reads`: None reads straight from the object store where the service allows it and through the service
    otherwise (one entry read here says which); True insists, failing here, before Ray starts, where it cannot.
    PoolDoesNotFit, at once, where the cluster has not the CPUs for `actors` actors (one CPU each).
    `bucket_batch=B`: the rows come in batches of B entries of similar lengths (client/training/length_buckets.py,
    by `seed`), in that order, for `iter_torch_batches(batch_size=B)` to pad each to little more than its entries."""
    import ray.data

    index: DatasetIndex | None = None
    with FeatureClient(url, token) as client:
        if dataset is not None:
            if listing:
                raise ValueError("name a dataset or listing filters, not both")
            # the index (70 bytes an entry) goes to the actors, and Ray's rows are positions in it: a snapshot of
            # 10^7 entries is never 10^7 keys on the driver
            index = client.dataset(dataset)
            first = index.key(0) if len(index) else None
            order = np.arange(len(index))
            if bucket_batch is not None:
                buckets = bucketed_batches(index.records["tokens"], bucket_batch, seed)
                order = np.array(sharded(buckets, 0, 1), dtype=np.int64)
            source = _positions(order, actors, bucket_batch or batch_size)
        else:
            listed = list(client.keys(**listing))
            if bucket_batch is not None:
                buckets = bucketed_batches([entry.num_tokens for entry in listed], bucket_batch, seed)
                listed = [listed[i] for i in sharded(buckets, 0, 1)]
            texts = [entry.key().model_dump_json(exclude_none=True) for entry in listed]
            first = FeatureKey.model_validate_json(texts[0]) if texts else None
            source = ray.data.from_items([{"key": text} for text in texts])
    if first is None:
        raise ValueError(f"no entries in {'dataset ' + dataset if dataset else 'the listing'}: nothing to read")
    check_fits(actors, 0, 1, runs_tasks(source), knob="actors")  # one line now, not a silent wait in Ray
    direct_reads = _direct_reads(url, token, first, direct_reads)
    read = source.map_batches(
        _ReadEntries,
        fn_constructor_args=(url, token, direct_reads, index),
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=actors),
    )
    if bucket_batch is not None:  # the buckets' order is the point: Ray keeps it only when asked
        read.context.execution_options.preserve_order = True
    return read


def _positions(order: np.ndarray, actors: int, batch_size: int) -> ray.data.Dataset:
    """A snapshot's positions, in `order`, as blocks already in the object store, so no read task waits for a CPU
    that the actors hold (`ray.data.range` reads them in a task: with as many actors as CPUs it never ran, and
    nothing said why); blocks of whole batches, enough of them for every actor to have work."""
    import ray.data

    batches = -(-len(order) // batch_size)
    per_block = max(1, -(-batches // (actors * 16)))  # batches a block
    cuts = range(per_block * batch_size, len(order), per_block * batch_size)
    return ray.data.from_numpy(np.split(order.astype(np.int64), list(cuts)))


def _direct_reads(url: str, token: str | None, key: FeatureKey, asked: bool | None) -> bool:
    """Whether the actors read from the object store: where asked (None) and the service hands out its chunks'
    URLs. One entry read directly here says so; a service keeping its blobs on its own disk says no (409)."""
    if asked is False:
        return False
    with FeatureClient(url, token, direct_reads=True) as client:
        try:
            client.get_many([key])
        except DirectReadsUnavailableError as exc:
            if asked:
                raise DirectReadsUnavailableError(f"read_features(direct_reads=True): {exc}") from None
            return False
    return True


class PadFeatures(NumpyBatchCollateFn):
    """A batch of `read_features` rows collated as the torch feed collates samples (`pad_collate`): the collate_fn
    for `iter_torch_batches` (Ray takes a `NumpyBatchCollateFn` instance; a bare function is deprecated there)."""

    def __call__(self, batch: dict[str, np.ndarray]) -> Any:  # Ray's type is a free TypeVar; it is `_pad`'s dict
        return _pad(batch)


def _pad(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    samples: list[Sample] = []
    for position in range(len(batch["content_hash"])):
        sample: Sample = {name: str(batch[name][position]) for name in _STRINGS}
        hidden_dtype = _NAMED_DTYPES[str(batch["hidden_dtype"][position])]
        for name, column in batch.items():
            if name in _STRINGS or name == "hidden_dtype":
                continue
            tensor = torch.from_numpy(np.ascontiguousarray(column[position]))
            sample[name] = tensor.view(hidden_dtype) if name == HIDDEN_STATES else tensor
        samples.append(sample)
    return pad_collate(samples)


pad_features = PadFeatures()
