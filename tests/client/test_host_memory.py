"""Recycled host memory: a buffer comes back only once nothing refers to it, whatever refers to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client import FeatureClient, pad_collate
from client.host_memory import RecycledMemory
from client.training.torch_data import to_sample


def test_a_buffer_anything_still_refers_to_is_never_handed_out_again() -> None:
    memory = RecycledMemory(max_bytes=1 << 30)
    first = memory.take(4096)
    owner = id(first.base)
    holders = {
        "the array handed out": lambda a: a,
        "a numpy view": lambda a: a[16:].view(np.int16),
        "a memoryview": memoryview,
        "a tensor over it": torch.from_numpy,
        "a view of a tensor over it": lambda a: torch.from_numpy(a).view(torch.bfloat16)[8:],
    }
    for what, hold in holders.items():
        held = hold(first)
        del first
        again = memory.take(4000)
        assert id(again.base) != owner, f"handed out again while {what} held it"
        del again, held
        first = memory.take(4096)
        assert id(first.base) == owner, f"not reused once {what} was dropped"


def test_what_it_keeps_stays_under_its_bound() -> None:
    memory = RecycledMemory(max_bytes=10_000)
    kept = [memory.take(3000) for _ in range(5)]  # the last ones are fresh: the bound is reached
    assert memory.held() <= 10_000
    del kept
    memory.take(9000)  # free buffers give way to a bigger one
    assert memory.held() <= 10_000
    memory.release()
    assert memory.held() == 0


def test_recycled_batches_are_the_fresh_ones_and_a_kept_batch_is_never_written() -> None:
    def sample(length: int, value: float) -> dict:
        return {
            "hidden_states": torch.full((length, 2, 64), value, dtype=torch.bfloat16),
            "input_ids": torch.arange(length, dtype=torch.int32),
            "prompt_hash": f"p{length}",
            "content_hash": f"sha256:{length}",
        }

    long_ = [sample(100, 7.0), sample(100, 9.0)]
    kept = pad_collate(long_)
    expected = kept["hidden_states"].clone()
    mixed = [sample(30, 1.0), sample(100, 2.0)]
    for _ in range(3):  # each time from the memory of the batch dropped before (full of non-zero values)
        batch = pad_collate(mixed)
        fresh = pad_collate(mixed, recycle=False)
        assert torch.equal(batch["hidden_states"], fresh["hidden_states"])
        assert not batch["hidden_states"][0, 30:].any()  # the pads are zeros, not what the memory held
        del batch
    assert torch.equal(kept["hidden_states"], expected)


@pytest.fixture
def stored(client: FeatureClient) -> list:
    client.extract([{"id": f"s{i}", "text": "return event " * (i + 3)} for i in range(4)], featureset=[1, 2])
    return sorted(client.entries(), key=lambda m: m.seq)


def test_decoded_entries_a_caller_keeps_are_not_overwritten_by_later_reads(client: FeatureClient, stored: list) -> None:
    first = client.fetch(stored[0].feature_key())
    copy = first.hidden_states.clone()
    for manifest in stored[1:]:
        pad_collate([to_sample(client.fetch(manifest.feature_key()))])
    assert torch.equal(first.hidden_states, copy)
