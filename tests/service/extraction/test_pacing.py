"""The pacer keeps the launching thread a fixed number of decoder layers ahead of the GPU (CUDA events stood in for
here; tests/gpu runs the real ones), and is off on the CPU."""

from __future__ import annotations

import pytest
import torch

from service.extraction.extractor import Extractor
from service.extraction.pacing import LayerPacer
from service.model.loader import LoadedModel


def test_before_each_layer_the_thread_waits_for_the_layer_depth_back(
    tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[object] = []
    waited: list[int] = []

    class Event:
        def record(self) -> None:
            recorded.append(self)

        def query(self) -> bool:
            return recorded.index(self) % 2 == 1  # every other layer the GPU is found to be done already

        def synchronize(self) -> None:
            waited.append(recorded.index(self))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    pacer = LayerPacer(tiny_loaded.body.layers, 2, torch.device("cuda"))
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        with pacer.applied():
            tiny_loaded.body(input_ids=ids, use_cache=False)
        tiny_loaded.body(input_ids=ids, use_cache=False)  # hooks gone: nothing more recorded
    layers = tiny_loaded.num_layers
    assert len(recorded) == layers
    assert waited == [i for i in range(layers - 2) if i % 2 == 0] and pacer.waits == len(waited) > 0


def test_pacing_is_off_without_a_gpu(tiny_loaded: LoadedModel) -> None:
    assert Extractor(tiny_loaded, launch_ahead_layers=4).pacer.depth == 0
