"""The FP8 target on the GPU: every converted layer of the 256-wide tiny model's FP8 twin runs cuBLAS's block-scaled
FP8 GEMM (the fingerprint says so), that GEMM agrees with the dequantised weight's, a sample keeps its bits alone and
among neighbours in a pack, and stored entries are audited bit for bit. Run on the device:
python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

import pytest
import torch

from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.main import build_services
from service.model import fp8_activations
from service.model.devmodel import build_devmodel
from service.model.encode import EncodedPrompt
from service.model.fp8_weights import Fp8Linear, dequantize_weight, gemm_counts, write_fp8_checkpoint
from service.settings import Settings
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla", "causal_conv1d")
FEATURES = FeatureSet(layers=["embed", 0, 3, 5, 7, "final_norm"])
PACK = 8192


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fp8")
    model_dir = write_fp8_checkpoint(build_devmodel(root / "bf16", head_dim=64), root / "fp8")
    built = build_services(Settings(data_dir=root / "store", model_dir=model_dir, device="cuda", pack_tokens=PACK))
    yield built
    built.close()


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(5, 1000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _encoded(ids: list[int]) -> EncodedPrompt:
    return EncodedPrompt(prompt_ids=ids, completion_ids=None, completion_source=None, greedy_max_new_tokens=None)


def test_every_converted_layer_runs_the_block_scaled_gemm_and_agrees_with_the_dequantised_weight(services) -> None:
    with services.models.using() as extractor:
        model = extractor.loaded.model
        assert gemm_counts(model) == {"scaled-mm-blockwise": 50}
        layer = model.model.layers[0].mlp.gate_proj
        assert isinstance(layer, Fp8Linear)
        x = torch.randn(37, layer.in_features, device="cuda", dtype=torch.bfloat16)  # 37: not a multiple of 4
        with torch.inference_mode():
            fast = layer(x).float()
            exact = (
                x @ dequantize_weight(layer.weight, layer.weight_scale_inv, layer.block, torch.bfloat16).t()
            ).float()
    cosine = torch.nn.functional.cosine_similarity(fast, exact, dim=-1)
    assert cosine.min() > 0.995, cosine.min()  # the activations' own e4m3 rounding; a misread scale is far off


@pytest.mark.parametrize("tokens", [1, 37, 4096])
def test_the_one_pass_activation_quantizer_gives_the_torch_chain_s_bits(tokens: int) -> None:
    from service.model import fp8_kernels

    generator = torch.Generator(device="cuda").manual_seed(tokens)
    rows = torch.randn(tokens, 640, device="cuda", generator=generator) * torch.logspace(-3, 3, 640, device="cuda")
    rows[:, 128:256] = 0  # a group of zeros: the smallest scale, not a division by zero
    rows = rows.to(torch.bfloat16)
    padded = tokens + -tokens % 4
    chain, kernel = fp8_activations.quantize_rows(rows, padded), fp8_kernels.quantize_rows(rows, padded)
    assert torch.equal(chain[0].view(torch.uint8), kernel[0].view(torch.uint8))
    assert torch.equal(chain[1], kernel[1]) and chain[1].stride() == kernel[1].stride() == (1, padded)


@pytest.mark.parametrize("pack_rows", [1, 8], ids=["a row a program", "8 rows a program"])
def test_a_pack_quantized_in_one_launch_gives_each_sequence_its_own_quantization(
    pack_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the 27B's widths, filler NaN: each sequence's values and scales, strides included, are the one-pass
    kernel's of its rows alone (which the test above holds to the torch chain)."""
    from service.model import fp8_kernels

    monkeypatch.setattr(fp8_kernels, "PACK_ROWS", pack_rows)

    spans = [(0, 2047), (2048, 2049), (2112, 3000), (3008, 3012), (3072, 16383)]
    for width in (5120, 6144, 17408):
        generator = torch.Generator(device="cuda").manual_seed(width)
        rows = torch.randn(16384, width, device="cuda", generator=generator) * 8
        rows[2047:2048] = rows[3000:3008] = rows[16383:] = float("nan")  # filler, where padding rows land
        rows = rows.to(torch.bfloat16)
        layout = fp8_activations.PackQuantization(spans, 16384)
        for (start, end), (values, scales) in zip(spans, layout.quantize(rows), strict=True):
            padded = end - start + -(end - start) % 4
            alone_values, alone_scales = fp8_kernels.quantize_rows(rows[start:end].clone(), padded)
            assert torch.equal(values.view(torch.uint8), alone_values.view(torch.uint8)), (width, start)
            assert torch.equal(scales, alone_scales) and scales.stride() == alone_scales.stride(), (width, start)


def test_a_sample_keeps_its_bits_alone_and_among_neighbours(services) -> None:
    sample = _ids(1700, 0)
    seen = []
    with services.models.using() as extractor:
        for neighbours in ([], [_ids(900, 1), _ids(400, 2)], [_ids(3000, 3)]):
            items = [(_encoded(ids), f"n{i}") for i, ids in enumerate([sample, *neighbours])]
            extraction = dict(extractor.extract_many(items, FEATURES, Backend.FLA))[0].wait()
            assert extraction.fingerprint.fp8_gemm == {"scaled-mm-blockwise": 50}
            seen.append({t.name: to_torch(t) for t in extraction.tensors})
    for other in seen[1:]:
        assert all(torch.equal(seen[0][name], other[name]) for name in seen[0])


def test_fp8_entries_are_audited_bit_for_bit(services) -> None:
    samples = [{"token_ids": _ids(n, 10 + n)} for n in (1900, 700, 300, 2048, 64)]
    results = services.writer.extract(ExtractRequest(samples=samples, featureset=FEATURES, backend="fla")).results
    assert {r.manifest.fingerprint.quantization is not None for r in results} == {True}
    report = services.auditor.audit(len(samples), backend="fla")
    assert (report.total, report.reproduced) == (len(samples), len(samples))
