"""A pack's decoder layers replayed from CUDA graphs: each kind of layer is recorded once per pack, on a template
layer, and every later layer of that kind copies its weights into the template and replays the recording.

Why: in an own-rows pack every GEMM, norm mean and token mixer runs once per sequence, so a short-mix pack (~15
sequences) launches some 25,000 kernels, each through Python, and the extracting thread set the pace: the GPU idled
20% of a bf16 short-mix run and 45% of an FP8 one (`benchmarks/results/*-h200.json` before this module). Layers of one
kind run the same kernels on the same shapes; only their weights differ. Recorded once, a layer costs one copy of its
weights and one graph launch.

Why the bits stay the eager forward's: a replay launches the kernels the recording saw, with the arguments it saw.
The only pointers that differ from an eager layer's are the weights', which point at the template's copies: blocks
of the same shapes, dtypes and strides, 512-byte aligned as every block of the caching allocator is, which is all a
kernel's choice can see of them. The first layer of each kind in a pack runs eagerly, so whatever compiles, tunes or
plans for the pack's shapes (Triton's specialisations, fla's autotuning, cuBLAS's heuristics) has done so before a
recording, where it could not. The GPU tests hold the bits at the 27B width; the canary of each key space holds them
on every host after every load (service/core/write/canary.py).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import nn

from schemas.backend import SINGLE_DEVICE
from schemas.device_run import LayerMode
from service.model.loader import LoadedModel

log = logging.getLogger("hsstore.extraction")


class Replay(Protocol):
    def replay(self) -> torch.Tensor:
        """Run what was recorded again; its output (the same tensor every time, for a CUDA graph)."""
        ...


class LayerRecorder(Protocol):
    """Records `run` (without running it) into something that runs it again and again."""

    def record(self, kind: Hashable, run: Callable[[], torch.Tensor]) -> Replay: ...


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    out: torch.Tensor

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.out


class CudaGraphRecorder:
    """CUDA graphs, recorded on side streams. A kind's newest graph stays alive until the next one of its kind is
    recorded into its memory pool: the pool never empties (a pool whose graphs are all gone cannot be recorded into
    again), and what the next recording reuses of it is only overwritten by replays queued after the last of the old
    graph's on the same stream. Two streams per kind, taken in turn: torch forgets a stream's cuBLAS workspaces when a
    graph recorded on it goes (pytorch#193402), so the graph that goes never shares a stream with the one that
    replaces it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._streams: dict[Hashable, list[torch.cuda.Stream]] = {}
        self._live: dict[Hashable, _Graph] = {}

    def record(self, kind: Hashable, run: Callable[[], torch.Tensor]) -> Replay:
        streams = self._streams.setdefault(kind, [torch.cuda.Stream(self.device), torch.cuda.Stream(self.device)])
        streams.reverse()
        stream, previous = streams[0], self._live.get(kind)
        graph = torch.cuda.CUDAGraph()
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            # thread_local: the writer threads' event waits and host allocations go on meanwhile, legally
            graph.capture_begin(pool=previous.graph.pool() if previous else None, capture_error_mode="thread_local")
            try:
                out = run()
            except BaseException:
                with contextlib.suppress(RuntimeError):
                    graph.capture_end()
                raise
            graph.capture_end()
        recorded = _Graph(graph, out)
        self._live[kind] = recorded  # the previous graph goes only now, its pool carried on by this one
        return recorded


# Whether replays beat eager layers end to end, by GPU model, at the 27B width with 64 layers, both modes side by side
# in one run: the first name found in the device's name decides; a GPU never measured runs eagerly (no graph pools to
# hold, and eager is never slower by much: the replays' gain is the host's launch time, 0-13% where it showed).
REPLAYS_MEASURED: dict[str, tuple[LayerMode, str]] = {
    "H200": (
        LayerMode.REPLAYED,
        "measured faster on an H200 end to end (short mix: bf16 9,938 vs 9,774 tok/s, FP8 12,716 vs 11,259; "
        "benchmarks/results/extract-h200-layer-modes.json, fp8-target-h200.json)",
    ),
    "H100": (
        LayerMode.EAGER,
        "no faster on an H100 (bf16, 64 layers, lean: short 9,897 vs 9,387 tok/s, long 10,599 vs 10,924, "
        "benchmarks/results/extract-h100-200k.json; in packs of 8,192 slower on both, #61), and their graph pools "
        "would cut the longest sequence an 80 GB card holds from 94,208 tokens to about 20,000",
    ),
}


def layer_mode(setting: bool | Literal["auto"], loaded: LoadedModel) -> tuple[LayerMode, str]:
    """The layer mode a model runs on its device, and why: the setting where it names one, else the table."""
    if loaded.device.type != "cuda" or loaded.device_map != SINGLE_DEVICE:
        return LayerMode.EAGER, "layers are recorded on one CUDA device only"
    if setting != "auto":
        return (LayerMode.REPLAYED if setting else LayerMode.EAGER), f"the setting cuda_graphs={str(setting).lower()}"
    name = torch.cuda.get_device_name(loaded.device)
    found = next((chosen for model, chosen in REPLAYS_MEASURED.items() if model in name), None)
    if found is None:
        return LayerMode.EAGER, f"cuda_graphs=auto: replays never measured on {name}, so eager (no graph pools)"
    mode, why = found
    return mode, f"cuda_graphs=auto on {name}: {mode.value}, {why}"


def graph_recorder(loaded: LoadedModel, mode: LayerMode) -> LayerRecorder | None:
    """CUDA graphs where layers are replayed (a spread model's layers sit on several devices: never recorded)."""
    if mode is not LayerMode.REPLAYED or loaded.device.type != "cuda" or loaded.device_map != SINGLE_DEVICE:
        return None
    return CudaGraphRecorder(loaded.device)


def _tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Everything a layer's forward reads that differs between layers: its parameters and buffers."""
    return [*module.named_parameters(), *module.named_buffers()]


def kind_of(layer: nn.Module) -> Hashable:
    """Layers of one kind run the same code on tensors of the same names, shapes, strides and dtypes."""
    modules = tuple((name, type(module).__qualname__) for name, module in layer.named_modules())
    tensors = tuple((n, tuple(t.shape), t.stride(), t.dtype, str(t.device)) for n, t in _tensors(layer))
    return (getattr(layer, "block_type", None), modules, tensors)


@dataclass
class _Kind:
    template: nn.Module
    weights: list[torch.Tensor]  # the template's, in _tensors order
    left: int = 0  # layers of this kind still to run in the pack
    warmed: bool = False  # one ran eagerly in this pack
    replay: Replay | None = None
    inputs: torch.Tensor | None = None
    given: list[Any] = field(default_factory=list)  # the keyword arguments the recording read (by identity)


class LayerGraphs:
    """The decoder layers of one model, each kind with a template (a copy of its first layer) that `recorder`
    records; `routed(...)` sends a pack's layers through them."""

    def __init__(self, layers: Sequence[nn.Module], recorder: LayerRecorder) -> None:
        self.layers = list(layers)
        self.recorder = recorder
        self.kinds = [kind_of(layer) for layer in self.layers]
        self._sources = [[t for _, t in _tensors(layer)] for layer in self.layers]
        self._templates: dict[Hashable, nn.Module] = {}
        for index, kind in enumerate(self.kinds):
            if kind not in self._templates and self.kinds.count(kind) > 1:
                self._templates[kind] = copy.deepcopy(self.layers[index])
        self.failure: str | None = None  # why a recording failed here once: every layer runs eagerly from then on
        self.replays = 0  # in the last pack routed

    @property
    def templates(self) -> list[nn.Module]:
        """The modules a pack's per-sequence and fused forwards must reach besides the model's own."""
        return list(self._templates.values())

    @contextlib.contextmanager
    def routed(self, last: int) -> Iterator[None]:
        """While the block runs, layers 0..`last` of each kind run eagerly for the first of their kind, are recorded
        at the second (where two or more are left) and replayed from then on."""
        state = {
            kind: _Kind(template, [t for _, t in _tensors(template)]) for kind, template in self._templates.items()
        }
        for kind in self.kinds[: last + 1]:
            if kind in state:
                state[kind].left += 1
        self.replays = 0
        try:
            for index, layer in enumerate(self.layers):
                if self.kinds[index] in state and index <= last:
                    layer.forward = self._route(index, layer, state[self.kinds[index]])
            yield
        finally:
            for layer in self.layers:
                layer.__dict__.pop("forward", None)

    def _route(self, index: int, layer: nn.Module, kind: _Kind) -> Callable[..., torch.Tensor]:
        eager = type(layer).forward

        def forward(hidden_states: torch.Tensor, **given: Any) -> torch.Tensor:
            kind.left -= 1
            if kind.replay is None:
                if self.failure is not None or not kind.warmed or kind.left < 1:
                    kind.warmed = True
                    return eager(layer, hidden_states, **given)
                if not self._record(index, kind, hidden_states, given):
                    return eager(layer, hidden_states, **given)
            assert kind.replay is not None and kind.inputs is not None
            _same_arguments(kind.given, given)
            for target, source in zip(kind.weights, self._sources[index], strict=True):
                target.copy_(source)
            kind.inputs.copy_(hidden_states)
            self.replays += 1
            return kind.replay.replay()

        return forward

    def _record(self, index: int, kind: _Kind, hidden_states: torch.Tensor, given: dict[str, Any]) -> bool:
        inputs = torch.empty_like(hidden_states)
        template = kind.template
        try:
            kind.replay = self.recorder.record(
                self.kinds[index], lambda: type(template).forward(template, inputs, **given)
            )
        except Exception as exc:
            log.exception("recording layer %d's kind failed; every layer runs eagerly from now on", index)
            self.failure = f"recording layer {index}'s kind failed ({type(exc).__name__}: {str(exc).splitlines()[0]})"
            return False
        kind.inputs, kind.given = inputs, _tensor_arguments(given)
        return True


def _tensor_arguments(given: dict[str, Any]) -> list[Any]:
    found: list[Any] = []
    for value in given.values():
        found.extend(value if isinstance(value, tuple | list) else [value])
    return [value for value in found if isinstance(value, torch.Tensor)]


def _same_arguments(recorded: list[Any], given: dict[str, Any]) -> None:
    """A replay reads the tensors the recording read (the pack's positions and rotary tables, made once per
    forward): the layers must be handed those very tensors."""
    now = _tensor_arguments(given)
    if len(now) != len(recorded) or any(a is not b for a, b in zip(now, recorded, strict=True)):
        raise RuntimeError("a layer replayed from a CUDA graph was handed other tensors than the ones recorded")
