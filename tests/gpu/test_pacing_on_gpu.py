"""Pacing the extraction thread a few layers ahead of the GPU (marked gpu): it waits on events, and the bits stay.
Run on the device with: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

import torch

from schemas.backend import Backend
from schemas.featureset import FeatureSet
from schemas.samples import parse_sample
from service.extraction.extractor import Extractor
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla")


def test_paced_extraction_waits_on_the_gpu_and_keeps_every_bit() -> None:
    from service.model.synthetic import build_synthetic

    loaded = build_synthetic("cuda", num_layers=8)
    featureset = FeatureSet(layers=list(range(8)))
    ids = torch.randint(0, 248000, (3000,), generator=torch.Generator().manual_seed(3)).tolist()
    item = (loaded.spec.encode(parse_sample({"token_ids": ids}), 1 << 20), "paced")
    results = {}
    for depth in (0, 2):
        extractor = Extractor(loaded, fuse=False, launch_ahead_layers=depth)  # no probes: one forward
        ((_, pending),) = extractor.extract_many([item], featureset, Backend.FLA, 0)
        results[depth] = bytes(next(t for t in pending.wait().tensors if t.name == "hidden_states").data)
        assert (extractor.pacer.waits > 0) == (depth > 0)  # 3,000 tokens: the GPU is behind the thread
    assert results[0] == results[2]
