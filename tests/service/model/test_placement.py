"""A model spread over several devices: each layer takes its inputs on its own device, the bits are those of the
model on one device (here two CPU "devices", which exercises the hooks; the GPU answer is measured on the 2-GPU
machine by benchmarks/workers.py), and the fingerprint names the placement."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from schemas.backend import Backend
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.samples import parse_sample
from service.extraction.extractor import Extractor
from service.model.loader import LoadedModel, load_spec, load_weights
from service.model.placement import devices_of, spread_layers


def test_devices_of_a_setting() -> None:
    assert devices_of("cuda:0,cuda:1") == [torch.device("cuda:0"), torch.device("cuda:1")]
    assert devices_of("cpu") == [torch.device("cpu")]


def test_a_spread_model_gives_the_same_bits_and_says_so(tiny_loaded: LoadedModel) -> None:
    featureset = FeatureSet(layers=["embed", 1, 5, 7, "final_norm"], target_ids=True)
    encoded = tiny_loaded.spec.encode(parse_sample({"text": "def spread(x): return [x] * 3\n" * 8}), 4096)

    def extract(loaded: LoadedModel) -> tuple[str, str]:
        extraction = Extractor(loaded).extract(encoded, featureset, Backend.TORCH, "placement")
        return content_hash(extraction.tensors), extraction.fingerprint.device_map

    single, single_map = extract(tiny_loaded)
    spread = copy.deepcopy(tiny_loaded.model)
    placement = spread_layers(spread, [torch.device("cpu"), torch.device("cpu")])
    loaded = LoadedModel(
        tiny_loaded.path,
        spread,
        tiny_loaded.tokenizer,
        tiny_loaded.revision,
        tiny_loaded.device,
        tiny_loaded.kernels,
        placement,
    )
    split, split_map = extract(loaded)
    assert split == single
    assert single_map == "single device" and split_map == "layers 0-3 on cpu; layers 4-7 on cpu"


def test_the_loader_spreads_when_given_several_devices(tiny_model_dir: Path, tiny_loaded: LoadedModel) -> None:
    spec = load_spec(tiny_model_dir, tiny_loaded.revision, "cpu")
    loaded = load_weights(spec, devices="cpu,cpu")
    assert loaded.device_map.startswith("layers 0-3 on cpu")
