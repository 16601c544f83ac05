"""fp8 and top-k featuresets on the GPU (marked gpu): quantised on the device, they reproduce their bits when audited,
and the stored top-k equals a full-vocabulary log-softmax there. Run on the device with:
python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

import pytest
import torch

from compute.forward import attention_pinned
from compute.fp8 import quantise
from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import PINNED_ATTENTION
from schemas.featureset import FeatureSet
from service.main import build_services
from service.model.devmodel import build_devmodel
from service.settings import Settings
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla", "causal_conv1d")
SAMPLES = [{"token_ids": [(11 * i + n) % 1000 + 3 for i in range(n)]} for n in (33, 700, 1500)]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):
    model_dir = build_devmodel(tmp_path_factory.mktemp("gpu-model") / "small", head_dim=64)
    settings = Settings(data_dir=tmp_path_factory.mktemp("store"), model_dir=model_dir, device="cuda")
    return build_services(settings)


def test_fp8_and_top_k_entries_reproduce_their_bits_on_the_gpu(services) -> None:
    bf16 = FeatureSet(layers=[1, 5, 7])
    small = FeatureSet(layers=[1, 5, 7], dtype="float8_e4m3fn", target_ids=True, top_k=32)
    exact = services.writer.extract(ExtractRequest(samples=SAMPLES, featureset=bf16, backend="fla")).results
    results = services.writer.extract(ExtractRequest(samples=SAMPLES, featureset=small, backend="fla")).results
    for plain, quantised in zip(exact, results, strict=True):
        stored = services.reader.read(quantised.manifest).tensors
        reference = services.reader.read(plain.manifest).tensors
        q, scales = quantise(to_torch(reference["hidden_states"]))  # the device's quantisation is the CPU's
        assert torch.equal(to_torch(stored["hidden_states"]).view(torch.uint8), q.view(torch.uint8))
        assert torch.equal(to_torch(stored["hidden_scales"]), scales)
        # the argmax is a most likely token (bf16 logits tie: argmax and topk may pick different ones of equals)
        logprobs, ids = to_torch(stored["topk_logprobs"]), to_torch(stored["topk_ids"])
        at_target = (ids == to_torch(stored["target_ids"]).unsqueeze(-1)) & (logprobs == logprobs[:, :1])
        assert bool(at_target.any(dim=-1).all())
    report = services.auditor.audit(2 * len(SAMPLES))
    assert (report.total, report.reproduced) == (2 * len(SAMPLES), 2 * len(SAMPLES)), report


def test_top_k_on_the_gpu_equals_the_full_vocabulary_log_softmax(services) -> None:
    featureset = FeatureSet(layers=[7], top_k=16)
    (result,) = services.writer.extract(ExtractRequest(samples=SAMPLES[1:2], featureset=featureset)).results
    stored = services.reader.read(result.manifest).tensors
    model = services.models.extractor().loaded.model
    with torch.inference_mode(), attention_pinned(PINNED_ATTENTION):  # the computation the entry names
        logits = model(input_ids=torch.tensor([SAMPLES[1]["token_ids"]], device="cuda"), use_cache=False).logits[0]
    reference = torch.log_softmax(logits.float(), dim=-1).cpu()
    ids = to_torch(stored["topk_ids"]).long()
    assert torch.allclose(reference.gather(-1, ids), to_torch(stored["topk_logprobs"]), atol=1e-4)
    assert torch.allclose(to_torch(stored["topk_mass"]), reference.gather(-1, ids).exp().sum(-1), atol=1e-5)
