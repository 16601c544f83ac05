"""How a result's tensors come down to host memory without the extracting thread waiting for the GPU: on a side
stream into pinned memory, so the next forward overlaps the copy (and token ids go up from pinned memory alike). On a
device without streams (the CPU) a copy is the tensor itself, made contiguous."""

from __future__ import annotations

import torch

from compute.forward import ForwardPlan
from schemas.manifest import HIDDEN_STATES
from service.extraction.packing import Pack


class HostCopies:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    @property
    def pinned(self) -> bool:
        """Whether host tensors that go to or come from the device are pinned (so copies need not block)."""
        return self._stream is not None

    def of_pack(self, hidden: torch.Tensor, pack: Pack, plan: ForwardPlan) -> torch.Tensor | None:
        """A pack's captured layers on their way to host memory in one copy, into a pinned block of the pack's fixed
        size, which the pinned-memory cache hands out again for every later pack: entries of many lengths each in a
        block of its own made the cache pin new memory on the extracting thread (the GPU waited) and cost a copy each.
        None (each entry copied alone) where there is no copy stream, for fp8 (quantised per entry), and for a pack
        that is mostly filler (an audit's lone sequence would hold a whole pack's block)."""
        real = sum(segment.length for segment in pack.segments)
        if self._stream is None or plan.quantised or 2 * real < pack.shape:
            return None
        host, _ = self.of({HIDDEN_STATES: hidden})
        return host[HIDDEN_STATES]

    def of(self, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.cuda.Event | None]:
        """Host copies of `tensors` and the event that marks them done (None: done already). The stream runs in
        order, so the event also marks every copy started before it done."""
        if self._stream is None:
            return {name: t.contiguous() for name, t in tensors.items()}, None
        compute = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(compute)
        host: dict[str, torch.Tensor] = {}
        with torch.cuda.stream(self._stream):
            for name, tensor in tensors.items():
                source = tensor.contiguous()
                host[name] = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
                host[name].copy_(source, non_blocking=True)
                source.record_stream(self._stream)  # keep the device memory alive until the copy is done
            done = torch.cuda.Event()
            done.record(self._stream)
        return host, done
