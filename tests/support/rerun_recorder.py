"""A stand-in for CUDA graphs on any host: `record` keeps the function without running it, and every replay runs it
again on whatever the template's weights and input buffer hold then, into one output tensor that each replay
overwrites, as a graph's static output is. What differs from a graph (the Python runs again) is what the CPU tests
need: every op a replay runs is seen, so they can hold a replayed layer to the ops and bits of the eager one."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch


class _Rerun:
    def __init__(self, run: Callable[[], torch.Tensor]) -> None:
        self.run = run
        self.out: torch.Tensor | None = None

    def replay(self) -> torch.Tensor:
        result = self.run()
        if self.out is None:
            self.out = torch.empty_like(result)
        return self.out.copy_(result)


class RerunRecorder:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail  # every recording raises, as a capture that met a host sync would
        self.recorded: list[Hashable] = []

    def record(self, kind: Hashable, run: Callable[[], torch.Tensor]) -> _Rerun:
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.recorded.append(kind)
        return _Rerun(run)
