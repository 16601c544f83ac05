"""`DeviceFeed`: batches landed on the device ahead of the step, never a buffer handed out while it is filled, and
fp8 featuresets moved as stored and dequantised on the device to the bits a CPU dequantisation gives (run here on
a CPU device by the same path; tests/gpu runs it on CUDA)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from client import DeviceFeed, FeatureClient, FeatureDataset, fetch_sample, pad_collate
from schemas.featureset import FeatureSet


def batches(count: int) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    return [
        {
            "hidden_states": torch.randn((2, 16 + i, 3, 8), generator=generator).to(torch.bfloat16),
            "input_ids": torch.arange(2 * (16 + i)).view(2, -1),
            "content_hash": [f"h{i}a", f"h{i}b"],
        }
        for i in range(count)
    ]


class Reused:
    """A loader that writes every batch into the same tensors, as a pinned-memory loader reusing buffers would:
    a feed that handed out (or copied late from) a buffer still being refilled would deliver the wrong batch."""

    def __init__(self, source: list[dict], pinned: bool = False) -> None:
        self.source, self.pinned = source, pinned

    def __iter__(self):
        largest = {k: v for batch in self.source for k, v in batch.items() if isinstance(v, torch.Tensor)}
        shared = {k: torch.zeros(v.numel() * 2, dtype=v.dtype, pin_memory=self.pinned) for k, v in largest.items()}
        for batch in self.source:
            out = dict(batch)
            for name, value in batch.items():
                if isinstance(value, torch.Tensor):
                    view = shared[name][: value.numel()].view(value.shape)
                    view.copy_(value)
                    out[name] = view
            yield out


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_every_batch_lands_as_it_was_made(depth: int) -> None:
    source = batches(7)
    landed = list(DeviceFeed(Reused(source), "cpu", depth=depth))
    assert len(landed) == len(source)
    for got, want in zip(landed, source, strict=True):
        assert got["content_hash"] == want["content_hash"]
        assert all(torch.equal(got[k], want[k]) for k in ("hidden_states", "input_ids"))


def test_an_error_in_the_loader_reaches_the_step() -> None:
    def failing():
        yield batches(1)[0]
        raise RuntimeError("loader broke")

    feed = iter(DeviceFeed(failing(), "cpu"))
    next(feed)
    with pytest.raises(RuntimeError, match="loader broke"):
        next(feed)


def test_leaving_early_stops_the_filler() -> None:
    feed = DeviceFeed(batches(20), "cpu", depth=2)
    for index, _ in enumerate(feed):
        if index == 1:
            break  # the generator's cleanup drains the queue and joins its thread


def test_fp8_travels_as_stored_and_dequantises_on_the_device_to_the_cpu_bits(client: FeatureClient) -> None:
    samples = [{"text": "def fp8_feed(x): return x " * (i + 2)} for i in range(3)]
    fp8 = FeatureSet(layers=[1, 2], dtype="float8_e4m3fn")
    keys = [r.manifest for r in client.extract(samples, featureset=fp8).results]
    url = client.url
    stored = DataLoader(FeatureDataset(url, keys, dequantise=False), batch_size=3, collate_fn=pad_collate)
    on_cpu = DataLoader(FeatureDataset(url, keys), batch_size=3, collate_fn=pad_collate)
    as_stored = next(iter(stored))
    assert as_stored["hidden_states"].dtype == torch.float8_e4m3fn and as_stored["hidden_scales"].dtype == torch.float32
    landed = next(iter(DeviceFeed(stored, "cpu")))
    expected = next(iter(on_cpu))
    assert "hidden_scales" not in landed and landed["hidden_states"].dtype == torch.bfloat16
    assert torch.equal(landed["hidden_states"], expected["hidden_states"])
    # `fetch_sample` leaves fp8 hidden states to their dequantisation: decoded, not deferred
    fetched = pad_collate([fetch_sample(client, key) for key in keys])
    assert torch.equal(fetched["hidden_states"], expected["hidden_states"])
