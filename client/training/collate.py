"""Collating samples into batches: right-padded (`pad_collate`) or packed along tokens (`pack_collate`)."""

from __future__ import annotations

import math
from concurrent.futures import Future, wait
from typing import Any

import torch

from client.chunk_checks import DeferredCopy
from client.host_memory import HOST_MEMORY
from compute.tensors import TORCH_DTYPES
from schemas.manifest import HIDDEN_STATES
from schemas.tensors import DTYPES

Sample = dict[str, Any]

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
    arrays = {
        name: _batch_memory(shape, dtype, pin_memory, recycle and name == HIDDEN_STATES)
        for name, (shape, dtype) in pad_layout(samples).items()
    }
    return pad_into(samples, arrays)


def pad_layout(samples: list[Sample]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The shape and dtype of each array `pad_collate` makes of `samples`."""
    lengths = [s["input_ids"].shape[0] for s in samples]
    rows, longest = len(samples), max(lengths)
    first = samples[0][HIDDEN_STATES]
    dtype = TORCH_DTYPES[first.dtype] if isinstance(first, DeferredCopy) else first.dtype
    layout = {
        HIDDEN_STATES: ((rows, longest, *first.shape[1:]), dtype),
        "input_ids": ((rows, longest), torch.long),
        "attention_mask": ((rows, longest), torch.bool),
        "lengths": ((rows,), torch.long),
    }
    for name in _PER_TOKEN:
        if (values := _per_token(samples, name)) is not None:
            layout[name] = ((rows, longest, *values[0].shape[1:]), _collated_dtype(values[0]))
    return layout


def pad_into(samples: list[Sample], arrays: dict[str, torch.Tensor]) -> dict[str, Any]:
    """`pad_collate` into `arrays` (of `pad_layout(samples)`, in memory that may hold anything: every byte of the
    batch is written, pads with 0)."""
    lengths = [s["input_ids"].shape[0] for s in samples]
    hidden = arrays[HIDDEN_STATES]
    # not zeroed first: zero-filling the whole batch costs a pass over it (torch.zeros ran at 1.4 GB/s per core on
    # the GPU host, half the loader's time); only the pads are zeroed, below. The small arrays are zeroed whole.
    for name, values in arrays.items():
        if name != HIDDEN_STATES:
            values.zero_()
    arrays["lengths"].copy_(torch.tensor(lengths))
    per_token = {name: _per_token(samples, name) or [] for name in _PER_TOKEN if name in arrays}
    copying: list[tuple[DeferredCopy, list[Future]]] = []
    try:
        for row, (sample, length) in enumerate(zip(samples, lengths, strict=True)):
            source = sample[HIDDEN_STATES]
            if isinstance(source, DeferredCopy):  # checked chunk by chunk as it lands, on the decode pool
                out = hidden[row, :length].view(torch.uint8).numpy().view(DTYPES[source.dtype][1])
                copying.append((source, source.start_copy(out.reshape(source.shape))))
            else:
                hidden[row, :length] = source
            hidden[row, length:] = 0
            arrays["input_ids"][row, :length] = sample["input_ids"]
            arrays["attention_mask"][row, :length] = True
            for name, each_sample in per_token.items():
                arrays[name][row, :length] = each_sample[row]
        for source, checks in copying:
            source.finish(checks)
    except BaseException:
        # no copy may go on writing into memory its caller is about to reuse (a ProcessFeed segment is)
        wait([future for _, checks in copying for future in checks])
        raise
    return {**arrays, "content_hash": [s["content_hash"] for s in samples]}


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
