"""Batches landed in device memory ahead of the training step.

A thread takes batches from the loader, copies each tensor into pinned host buffers of its own (a ring of slots,
reused: pinning is slow and a fresh pinned buffer per batch costs more than the copy; a tensor the loader pinned
itself is copied from in place, and the copy has ended before the loader is asked for the next batch), and copies
them to the device on a side stream, `depth` batches ahead. The step gets a batch only behind the event of its copy
(its stream waits; the CPU does not), and a slot is refilled only after the copy out of it has completed, so no
buffer is ever handed out, or written, while a copy still reads it. An fp8 featureset read with `dequantise=False`
travels as stored (fp8 plus its scales: half the bytes of bfloat16) and is dequantised here, on the device, with the
same function as on the CPU (`compute.fp8.dequantise`, exact up to its one rounding, so the bits are those of a CPU
dequantisation).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from compute.fp8 import dequantise

Batch = dict[str, Any]
_END = object()


class _Slot:
    """Pinned host buffers for one batch in flight, and the event after which they may be written again."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self.buffers: dict[str, torch.Tensor] = {}
        self.copied: torch.cuda.Event | None = None
        self.borrowed = False  # a tensor the loader pinned itself is copied from in place: the loader may reuse it

    def stage(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if not self.pin:
            return tensor
        if tensor.is_pinned():
            self.borrowed = True
            return tensor
        buffer = self.buffers.get(name)
        if buffer is None or buffer.numel() < tensor.numel() or buffer.dtype != tensor.dtype:
            buffer = self.buffers[name] = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
        staged = buffer[: tensor.numel()].view(tensor.shape)
        staged.copy_(tensor)
        return staged

    def wait_free(self) -> None:
        if self.copied is not None:
            self.copied.synchronize()


class DeviceFeed:
    """`for batch in DeviceFeed(loader, "cuda")`: each batch's tensors on the device, `depth` batches copied ahead.
    Non-tensor values (content hashes) pass through. On a CPU device the batches are copies, by the same path."""

    def __init__(self, batches: Iterable[Batch], device: torch.device | str, depth: int = 2) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.batches = batches
        self.device = torch.device(device)
        self.depth = depth

    def __iter__(self) -> Iterator[Batch]:
        cuda = self.device.type == "cuda"
        side = torch.cuda.Stream(self.device) if cuda else None
        slots = [_Slot(pin=cuda) for _ in range(self.depth + 1)]  # depth queued, one more being filled
        ready: queue.Queue[object] = queue.Queue(self.depth)
        stop = threading.Event()

        def fill() -> None:
            try:
                for index, batch in enumerate(self.batches):
                    if stop.is_set():
                        return
                    slot = slots[index % len(slots)]
                    slot.wait_free()
                    ready.put(self._landed(batch, slot, side))
            except BaseException as exc:  # handed to the consumer, raised there
                ready.put(exc)
            ready.put(_END)

        filler = threading.Thread(target=fill, name="hsstore-device-feed", daemon=True)
        filler.start()
        try:
            while (item := ready.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                landed: dict[str, Any]
                event: Any
                landed, event = item  # type: ignore[misc]  # neither an error nor _END: a (tensors, event) pair
                if cuda:
                    stream = torch.cuda.current_stream(self.device)
                    stream.wait_event(event)
                    for value in landed.values():
                        if isinstance(value, torch.Tensor):
                            value.record_stream(stream)  # its memory is not reused while the step may read it
                yield _dequantised(landed)
        finally:
            stop.set()
            while filler.is_alive():  # let a filler blocked on a full queue finish
                try:
                    ready.get_nowait()
                except queue.Empty:
                    filler.join(0.01)

    def _landed(self, batch: Batch, slot: _Slot, side: torch.cuda.Stream | None) -> tuple[Batch, object]:
        staged = {k: slot.stage(k, v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        if side is None:
            return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in staged.items()}, None
        with torch.cuda.stream(side):
            landed = {
                k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in staged.items()
            }
            slot.copied = torch.cuda.Event()
            slot.copied.record(side)
        if slot.borrowed:  # not ours to keep: the copy out of it ends before the loader is asked for more
            slot.copied.synchronize()
            slot.borrowed = False
        return landed, slot.copied


def _dequantised(batch: Batch) -> Batch:
    """An fp8 batch (hidden_states float8 plus hidden_scales) as bfloat16 hidden_states, on its device."""
    if "hidden_scales" not in batch:
        return batch
    out = dict(batch)
    out["hidden_states"] = dequantise(out["hidden_states"], out.pop("hidden_scales"))
    return out
