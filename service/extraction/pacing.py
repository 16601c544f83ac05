"""Keeping the thread that launches GPU work a bounded number of decoder layers ahead of the GPU.

A thread blocked in a kernel launch because the GPU's queue is full still holds the GIL, so the writer threads
(hashing, compression) get it only when the interpreter forces a switch; they fall behind until the extraction loop
waits on them, and the GPU's queue runs dry meanwhile. Waiting on an event `depth` layers back instead releases the
GIL while the GPU works and leaves `depth` layers queued, so neither waits for the other. Events change nothing the
kernels compute.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import torch


class LayerPacer:
    def __init__(self, layers: Sequence[torch.nn.Module], depth: int, device: torch.device) -> None:
        self.layers = layers
        self.depth = depth if device.type == "cuda" else 0
        self.waits = 0  # times the thread had to wait for the GPU

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        if self.depth <= 0:
            yield
            return
        pending: deque[torch.cuda.Event] = deque()

        def before_layer(_module: Any, _args: Any) -> None:
            event = torch.cuda.Event()
            event.record()
            pending.append(event)
            if len(pending) > self.depth:
                oldest = pending.popleft()
                if not oldest.query():  # when the GPU is behind: give up the GIL and wait
                    oldest.synchronize()
                    self.waits += 1

        handles = [layer.register_forward_pre_hook(before_layer) for layer in self.layers]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
