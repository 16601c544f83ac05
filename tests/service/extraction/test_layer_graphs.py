"""Decoder layers replayed from recordings (service/extraction/layer_graphs.py) give the eager layers' bits: the first
layer of each kind runs eagerly, the second is recorded on its kind's template, and every later one copies its own
weights into the template and replays. A stand-in recorder (tests/support/rerun_recorder.py) reruns what was recorded,
so on any host each replay computes with the weights and input it was handed, as a graph does; the GPU tests hold the
CUDA graphs themselves at the 27B width (tests/gpu/test_exact_on_gpu.py). That a replayed pack's layers run exactly
the row-dependent ops of each sequence's own forward is test_own_rows.py's."""

from __future__ import annotations

import pytest
import torch

from compute.forward import ForwardPlan
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.extraction.layer_graphs import LayerGraphs
from service.model.devmodel import build_devmodel
from service.model.loader import LoadedModel
from service.model.revision_cache import cached_model_revision
from tests.conftest import load_model
from tests.support.rerun_recorder import RerunRecorder

LAYERS = 12  # full attention at 3, 7 and 11: each kind has a layer that runs eagerly, one recorded and replays


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    model_dir = build_devmodel(tmp_path_factory.mktemp("models") / "tiny-12", num_layers=LAYERS)
    return load_model(model_dir, cached_model_revision(model_dir, model_dir.parent / "revisions.json"))


def _ids(n: int) -> torch.Tensor:
    return torch.randint(0, 250, (1, n), generator=torch.Generator().manual_seed(n))


def _captured(loaded: LoadedModel, featureset: FeatureSet, graphs: LayerGraphs | None, last: int) -> torch.Tensor:
    plan = ForwardPlan.of(featureset, loaded.num_layers)
    with torch.inference_mode(), loaded.kernels.running(Backend.TORCH):
        if graphs is None:
            return plan.capture(loaded.body, _ids(77))[0]
        with graphs.routed(last):
            return plan.capture(loaded.body, _ids(77))[0]


def _no_layer_patched(loaded: LoadedModel) -> bool:
    return all("forward" not in layer.__dict__ for layer in loaded.body.layers)


def test_replayed_layers_give_every_layers_eager_bits(twelve: LoadedModel) -> None:
    every = FeatureSet(layers=["embed", *range(LAYERS), "final_norm"])
    recorder = RerunRecorder()
    graphs = LayerGraphs(twelve.body.layers, recorder)
    assert len(graphs.templates) == 2  # one per kind: linear and full attention
    eager = _captured(twelve, every, None, LAYERS - 1)
    for _ in range(2):  # a second forward records anew, as every pack does
        replayed = _captured(twelve, every, graphs, LAYERS - 1)
        assert torch.equal(replayed.view(torch.int16), eager.view(torch.int16))
        # 9 linear-attention layers: 0 eager, 1 recorded, 8 replayed; 3 full-attention ones: 3 eager, 2 replayed
        assert graphs.replays == 10 and len(recorder.recorded) % 2 == 0
    assert _no_layer_patched(twelve)


def test_a_forward_that_stops_early_replays_only_the_layers_it_runs(twelve: LoadedModel) -> None:
    early = FeatureSet(layers=[1, 5])
    graphs = LayerGraphs(twelve.body.layers, RerunRecorder())
    assert torch.equal(_captured(twelve, early, graphs, 5), _captured(twelve, early, None, 5))
    assert graphs.replays == 4  # linear layers 1, 2, 4 and 5; full attention's 3 alone of its kind: eager
    assert _no_layer_patched(twelve)


def test_a_recording_that_fails_leaves_every_layer_eager_from_then_on(twelve: LoadedModel) -> None:
    every = FeatureSet(layers=["embed", *range(LAYERS), "final_norm"])
    graphs = LayerGraphs(twelve.body.layers, RerunRecorder(fail=True))
    assert torch.equal(_captured(twelve, every, graphs, LAYERS - 1), _captured(twelve, every, None, LAYERS - 1))
    assert graphs.failure is not None and "recording layer" in graphs.failure and graphs.replays == 0


def test_a_replay_refuses_arguments_other_than_those_it_recorded(twelve: LoadedModel) -> None:
    """A replay reads the tensors the recording read: a layer handed new ones (rotary tables made per layer, say)
    must not be replayed on the recorded ones."""
    graphs = LayerGraphs(twelve.body.layers, RerunRecorder())
    hidden = torch.randn(1, 9, twelve.config.hidden_size, dtype=twelve.model.dtype)
    positions = torch.arange(9).view(1, -1)
    with torch.inference_mode(), twelve.kernels.running(Backend.TORCH), graphs.routed(LAYERS - 1):
        layers = [layer for layer in twelve.body.layers if layer.block_type == "linear_attention"]
        for layer in layers[:2]:  # eager, then recorded
            tables = twelve.body.rotary_emb(hidden, positions)
            layer(hidden, position_embeddings=tables, attention_mask=None)
        with pytest.raises(RuntimeError, match="other tensors"):
            layers[2](hidden, position_embeddings=twelve.body.rotary_emb(hidden, positions), attention_mask=None)
