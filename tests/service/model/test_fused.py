"""The fused forwards' plumbing: with kernels that compute what the Triton ones do (in torch ops, so CI can run them),
every layer keeps the eager bits and every kernel is used; on the CPU the service runs eager and says so."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from compute.forward import ForwardPlan
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.extraction.extractor import Extractor
from service.main import build_services
from service.model import fused as fused_module
from service.model.fused import EAGER, FusedForwards
from service.model.loader import LoadedModel
from service.settings import Settings


class CountingReferenceKernels:
    """The arithmetic each kernel in fused_kernels.py performs, as torch ops, counting calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def square(self, x: torch.Tensor) -> torch.Tensor:
        self.calls["square"] += 1
        return x.float() * x.float()

    def rms_tail(self, x: torch.Tensor, variance: torch.Tensor, eps: float, scale: torch.Tensor) -> torch.Tensor:
        self.calls["rms_tail"] += 1
        return ((x.float() * torch.rsqrt(variance + eps)) * scale).to(torch.bfloat16)

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        self.calls["silu_mul"] += 1
        return F.silu(gate) * up

    def gated_tail(
        self, x: torch.Tensor, variance: torch.Tensor, eps: float, weight: torch.Tensor, gate: Any
    ) -> torch.Tensor:
        self.calls["gated_tail"] += 1
        normed = (x.float() * torch.rsqrt(variance + eps)).to(torch.bfloat16)
        return ((weight * normed) * F.silu(gate.float())).to(torch.bfloat16)

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        self.calls["rotary"] += 1
        rotated = cos.shape[-1]
        x_rot, x_pass = x[..., :rotated], x[..., rotated:]
        turned = torch.cat([-x_rot[..., rotated // 2 :], x_rot[..., : rotated // 2]], dim=-1)
        return torch.cat([(x_rot * cos[:, None]) + (turned * sin[:, None]), x_pass], dim=-1)

    # the one-pass norms: the same arithmetic, the mean over every row (the CUDA kernels add in its order)
    def rms_norm(self, x: torch.Tensor, eps: float, scale: torch.Tensor) -> torch.Tensor:
        self.calls["rms_norm"] += 1
        return ((x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)) * scale).to(torch.bfloat16)

    def gated_norm(self, x: torch.Tensor, eps: float, weight: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        self.calls["gated_norm"] += 1
        normed = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16)
        return ((weight * normed) * F.silu(gate.float())).to(torch.bfloat16)


@pytest.mark.parametrize("one_pass", [True, False], ids=["one-pass norms", "two passes around the mean"])
def test_fused_forwards_keep_every_layers_bits(
    tiny_loaded: LoadedModel, one_pass: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The norms run in one pass where their rows are wide enough for CUDA's mean to reduce each row alike (the
    27B's are; the tiny model's 16 and 64 columns are not, unless the rule is widened for the test)."""
    if one_pass:
        monkeypatch.setattr(fused_module, "ROW_WISE_MEAN_COLUMNS", 16)
    kernels = CountingReferenceKernels()
    fused = FusedForwards(tiny_loaded.model, kernels)
    modeling = sys.modules[type(tiny_loaded.model).__module__]
    eager_rotary = modeling.apply_rotary_pos_emb
    layers = tiny_loaded.num_layers
    every_layer = ForwardPlan.of(FeatureSet(layers=[*range(layers), "final_norm"]), layers)
    ids = torch.randint(0, int(tiny_loaded.config.vocab_size), (1, 97), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        eager, _ = every_layer.capture(tiny_loaded.body, ids)
        with fused.applied():
            with_fusion, _ = every_layer.capture(tiny_loaded.body, ids)
        after, _ = every_layer.capture(tiny_loaded.body, ids)
    assert torch.equal(eager, with_fusion)
    assert torch.equal(eager, after)  # the eager forwards are back after the block
    assert modeling.apply_rotary_pos_emb is eager_rotary
    layers = tiny_loaded.num_layers
    linear = sum(t == "linear_attention" for t in tiny_loaded.config.layer_types)
    # two norms per layer, the q and k norms of the full-attention layers (q's input a strided view), final norm
    norms = 2 * layers + 2 * (layers - linear) + 1
    assert kernels.calls["silu_mul"] == layers
    assert kernels.calls["rotary"] == 2 * (layers - linear)  # q and k of each full-attention layer
    assert linear > 0
    if one_pass:
        assert (kernels.calls["rms_norm"], kernels.calls["gated_norm"]) == (norms, linear)
        assert kernels.calls["rms_tail"] == kernels.calls["gated_tail"] == kernels.calls["square"] == 0
    else:
        assert (kernels.calls["rms_tail"], kernels.calls["gated_tail"]) == (norms, linear)
        assert kernels.calls["square"] == norms + linear
        assert kernels.calls["rms_norm"] == kernels.calls["gated_norm"] == 0


def test_a_norm_weight_changed_in_place_is_used_at_the_next_call(tiny_loaded: LoadedModel) -> None:
    fused = FusedForwards(tiny_loaded.model, CountingReferenceKernels())
    norm, final_norm = tiny_loaded.body.norm, ForwardPlan.of(FeatureSet(layers=["final_norm"]), tiny_loaded.num_layers)
    ids = torch.randint(0, int(tiny_loaded.config.vocab_size), (1, 33), generator=torch.Generator().manual_seed(3))
    original = norm.weight.detach().clone()
    try:
        with torch.inference_mode(), fused.applied():
            before, _ = final_norm.capture(tiny_loaded.body, ids)
        with torch.no_grad():
            norm.weight.add_(0.5)
        with torch.inference_mode():
            eager, _ = final_norm.capture(tiny_loaded.body, ids)
            with fused.applied():
                after, _ = final_norm.capture(tiny_loaded.body, ids)
    finally:
        with torch.no_grad():
            norm.weight.copy_(original)
    assert torch.equal(eager, after)
    assert not torch.equal(before, after)


def test_cpu_extraction_runs_eager_and_the_fingerprint_says_so(settings: Settings, tiny_loaded: LoadedModel) -> None:
    assert FusedForwards.for_model(tiny_loaded.model, torch.device("cpu")) is None
    writer = build_services(settings, tiny_loaded).writer
    manifest = writer.extract(ExtractRequest(samples=[{"text": "fused?"}])).results[0].manifest
    assert manifest.fingerprint.elementwise == EAGER


class RoundsElsewhere(CountingReferenceKernels):
    """The RMSNorm tail with the same formula but bfloat16 intermediates: close, and not the eager bits."""

    def rms_tail(self, x: torch.Tensor, variance: torch.Tensor, eps: float, scale: torch.Tensor) -> torch.Tensor:
        return (x * torch.rsqrt(variance + eps).to(torch.bfloat16)) * scale.to(torch.bfloat16)


@pytest.mark.parametrize(("kernels", "fused"), [(CountingReferenceKernels, True), (RoundsElsewhere, False)])
def test_the_extractor_fuses_only_what_its_probe_proves_bit_equal(
    tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch, kernels: type, fused: bool
) -> None:
    monkeypatch.setattr(FusedForwards, "for_model", classmethod(lambda cls, model, device: cls(model, kernels())))
    extractor = Extractor(tiny_loaded)
    assert (extractor.plan(Backend.TORCH).fused is not None) is fused
    assert Extractor(tiny_loaded, fuse=False).plan(Backend.TORCH).fused is None
