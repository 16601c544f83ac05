"""`DeviceFeed` on CUDA: big batches from a loader that reuses its buffers (plain and pinned), a step slower than
the copies, every batch landed with the bits it was made with; fp8 dequantised on the GPU equals the CPU's bits.
Run on the device: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

import pytest
import torch

from client import DeviceFeed, pad_collate
from compute.fp8 import dequantise, quantise
from tests.client.training.test_device_feed import Reused
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with()


def big_batches(count: int) -> list[dict]:
    generator = torch.Generator().manual_seed(1)
    return [
        {"hidden_states": torch.randn((4, 2048, 5, 512), generator=generator).to(torch.bfloat16), "step": i}
        for i in range(count)
    ]


@pytest.mark.parametrize("pinned", [False, True], ids=["plain", "pinned"])
@pytest.mark.parametrize("depth", [1, 3])
def test_batches_land_intact_behind_a_slow_step(pinned: bool, depth: int) -> None:
    """Plain buffers are staged into the feed's own pinned ones; pinned buffers the loader reuses are copied from
    in place, and the loader is not asked for more until that copy ended."""
    source = big_batches(6)
    for batch in DeviceFeed(Reused(source, pinned), "cuda", depth=depth):
        torch.cuda._sleep(20_000_000)  # a step that outlasts the next copies
        want = source[batch["step"]]["hidden_states"]
        assert batch["hidden_states"].is_cuda
        assert torch.equal(batch["hidden_states"].cpu(), want)


def test_fp8_dequantised_on_the_gpu_has_the_cpu_bits() -> None:
    hidden = torch.randn((2, 300, 5, 512)).to(torch.bfloat16) * 7
    values, scales = quantise(hidden)
    landed = next(iter(DeviceFeed([{"hidden_states": values, "hidden_scales": scales}], "cuda")))
    assert torch.equal(landed["hidden_states"].cpu(), dequantise(values, scales))


def test_batches_collated_into_pinned_memory_land_as_collated() -> None:
    """`pad_collate(..., pin_memory=True)` puts every tensor of the batch in pinned memory, and the feed copies it
    up from there with the bits (and the zeroed pads) of a pageable collate."""
    generator = torch.Generator().manual_seed(2)
    samples = [
        {
            "hidden_states": torch.randn((n, 5, 512), generator=generator).to(torch.bfloat16),
            "input_ids": torch.randint(0, 1000, (n,), generator=generator, dtype=torch.int32),
            "content_hash": f"sha256:{n}",
        }
        for n in (700, 2048, 31)
    ]
    pinned = pad_collate(samples, pin_memory=True)
    assert all(t.is_pinned() for t in pinned.values() if isinstance(t, torch.Tensor) and t.dim() > 1)
    want = pad_collate(samples)
    landed = next(iter(DeviceFeed([pinned], "cuda")))
    for name, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(landed[name].cpu(), value), name


def test_a_process_feed_registers_its_memory_and_lands_batches_as_collated(live_url: str) -> None:
    """`ProcessFeed(pin_memory=True)`: every tensor of a batch lies in shared memory registered with CUDA, which
    `DeviceFeed` copies from in place, behind a step slower than the copies, epoch after epoch."""
    from client import FeatureClient, ProcessFeed, fetch_sample

    with FeatureClient(live_url) as client:
        samples = [{"id": f"g{i}", "text": "def handler(event): return event " * (i + 2)} for i in range(6)]
        client.extract(samples, featureset=["embed", 1, 2, 5])
        keys = [m.feature_key() for m in client.entries()]
        batches = [keys[i : i + 2] for i in range(0, len(keys), 2)]
        want = [pad_collate([fetch_sample(client, k) for k in b]) for b in batches]
    with ProcessFeed(live_url, processes=2, pin_memory=True) as feed:
        held = next(iter(feed.batches(batches[:1])))
        assert all(t.is_pinned() for t in held.values() if isinstance(t, torch.Tensor))
        del held
        for _ in range(3):
            for landed, expected in zip(DeviceFeed(feed.batches(batches), "cuda"), want, strict=True):
                torch.cuda._sleep(5_000_000)
                for name, value in expected.items():
                    if isinstance(value, torch.Tensor):
                        assert landed[name].is_cuda and torch.equal(landed[name].cpu(), value), name
