"""Full attention runs the kernel the computation names, whatever torch would pick for the shape: new entries pin
FlashAttention and their fingerprints say so; entries from before the pin name none, and their audits leave the choice
to torch again. The tests force torch's choice to the math kernel around everything, as another host, torch version or
shape may choose; the GPU's own choice (cuDNN at the 27B shape) is tests/gpu/test_exact_on_gpu.py's."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from compute.forward import ForwardPlan
from schemas.api import ExtractRequest
from schemas.backend import PINNED_ATTENTION
from schemas.featureset import FeatureSet
from service.extraction.extractor import Extractor
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings

EVERY_LAYER = FeatureSet(layers=list(range(8)))
PLAN = ForwardPlan.of(EVERY_LAYER, 8)


def test_the_pin_holds_whatever_torch_would_pick_and_none_leaves_it_to_torch(tiny_loaded: LoadedModel) -> None:
    ids = torch.randint(0, 200, (1, 37), generator=torch.Generator().manual_seed(3))
    model = tiny_loaded.model
    with torch.inference_mode():
        pinned, _ = PLAN.capture(tiny_loaded.body, ids)
        with sdpa_kernel(SDPBackend.MATH):
            pinned_amid_math, _ = PLAN.capture(tiny_loaded.body, ids)
            left_to_torch, _ = PLAN.capture(tiny_loaded.body, ids, attention=None)
            own = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    assert torch.equal(pinned_amid_math, pinned)
    # HF's tuple holds layers 0..6 raw (the last is the final norm's output)
    assert torch.equal(left_to_torch[0, :, :7], torch.stack([own[layer + 1][0] for layer in range(7)], dim=1))


def test_entries_from_before_the_pin_audit_under_torchs_choice(
    settings: Settings, tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = build_services(settings, tiny_loaded)
    earlier = [{"text": f"def before_{i}(x): return x * {i}"} for i in range(3)]
    later = [{"text": f"def after_{i}(x): return x + {i}"} for i in range(3)]
    with sdpa_kernel(SDPBackend.MATH):  # what torch picks on this host, as far as these tests know
        with monkeypatch.context() as patched:  # what the release before the pin ran
            patched.setattr(Extractor, "attention_kernel", None)
            old = services.writer.extract(ExtractRequest(samples=earlier, featureset=EVERY_LAYER)).results
        new = services.writer.extract(ExtractRequest(samples=later, featureset=EVERY_LAYER)).results
        report = services.auditor.audit(6)
    assert {r.manifest.fingerprint.attention_kernel for r in old} == {None}
    assert {r.manifest.fingerprint.attention_kernel for r in new} == {PINNED_ATTENTION}
    assert (report.total, report.reproduced, report.mismatched) == (6, 6, 0)
    services.close()
