"""The fused elementwise kernels on the GPU (marked gpu): bit-equal to the eager torch ops on every bfloat16 value,
and every layer of the 27B-shaped model keeps its eager bits at short and long lengths under all three backends.
Run on the device with: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from compute.forward import ForwardPlan
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.model.fused import FusedForwards, kernel_mismatches
from service.model.loader import LoadedModel
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("triton", "fla", "causal_conv1d")


@pytest.fixture(scope="module")
def shaped_27b() -> Iterator[LoadedModel]:
    from service.model.synthetic import build_synthetic

    loaded = build_synthetic("cuda", num_layers=8)  # two full-attention and six linear-attention layers
    yield loaded
    del loaded
    torch.cuda.empty_cache()


def test_every_kernel_gives_the_eager_bits_on_every_bfloat16_value() -> None:
    from service.model import fused_kernels

    assert kernel_mismatches(fused_kernels, torch.device("cuda")) == []


@pytest.mark.parametrize("backend", list(Backend))
def test_fused_forward_keeps_every_layers_bits_on_the_27b_shape(shaped_27b: LoadedModel, backend: Backend) -> None:
    from service.model import fused_kernels

    fused = FusedForwards.for_model(shaped_27b.model, shaped_27b.device)
    assert fused is not None
    layers = shaped_27b.num_layers
    every_layer = ForwardPlan.of(FeatureSet(layers=[*range(layers), "final_norm"]), layers)
    generator = torch.Generator().manual_seed(2)
    names = ("gated_norm", "gated_tail", "rms_norm", "rms_tail", "rotary")
    originals = {name: getattr(fused_kernels, name) for name in names}
    calls = dict.fromkeys(originals, 0)

    def counted(name: str) -> Callable[..., torch.Tensor]:
        def call(*args: Any) -> torch.Tensor:
            calls[name] += 1
            return originals[name](*args)

        return call

    for name in originals:
        setattr(fused_kernels, name, counted(name))
    try:
        with torch.inference_mode(), shaped_27b.kernels.running(backend):
            for length in (1, 77, 2048, 5000):
                ids = torch.randint(0, 248000, (1, length), generator=generator).cuda()
                eager, _ = every_layer.capture(shaped_27b.body, ids)
                with fused.applied():
                    with_fusion, _ = every_layer.capture(shaped_27b.body, ids)
                assert torch.equal(eager, with_fusion), f"{backend.value}, {length} tokens"
    finally:
        for name, original in originals.items():
            setattr(fused_kernels, name, original)
    # the fused path really ran, per length: the gated norm of each of the 6 linear-attention layers; two norms per
    # layer, the q norm (a strided view) and k norm of the 2 full-attention layers, and the final norm. In one pass
    # where a norm has 16 rows or more (the gated norm's 48 heads a token, q's 24), else in two around torch's mean
    # (a 1-token sequence's hidden and k norms); the rotary of q and of k in each full-attention layer
    hidden_and_k = 2 * 8 + 1 + 2
    one_pass = 2 + 3 * (hidden_and_k + 2)
    rotary = 4 * 2 * 2
    assert calls == {
        "gated_norm": 4 * 6,
        "gated_tail": 0,
        "rms_norm": one_pass,
        "rms_tail": hidden_and_k,
        "rotary": rotary,
    }
