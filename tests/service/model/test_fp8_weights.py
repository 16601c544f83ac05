"""The FP8 target: a checkpoint in the layout of Qwen's `-FP8` releases (e4m3 weights, `weight_scale_inv` per
128 x 128 block, `quantization_config` in config.json) loads as FP8 layers, is its own model revision, names its
quantization and the GEMM that ran in every fingerprint, and its entries are audited bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from schemas.model_revision import model_revision
from service.errors import ModelUnavailable
from service.main import build_services
from service.model.fp8_activations import FP8, PackQuantization, quantize_activations
from service.model.fp8_weights import (
    Fp8Linear,
    Fp8Scheme,
    dequantize_weight,
    gemm_counts,
    quantize_in_place,
    quantize_weight,
    write_fp8_checkpoint,
)
from service.model.loader import load_spec, load_weights
from service.settings import Settings

FEATURES = FeatureSet(layers=[1, 3, 5, "final_norm"])


@pytest.fixture(scope="module")
def fp8_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fp8_checkpoint(tiny_model_dir, tmp_path_factory.mktemp("models") / "tiny-fp8")


def test_block_quantization_rounds_each_block_to_e4m3_with_its_own_scale() -> None:
    weight = torch.randn(200, 300, generator=torch.Generator().manual_seed(0))
    weight[:128, :128] *= 1000  # one block far larger than its neighbours: its scale must not leak into theirs
    quantized, scale = quantize_weight(weight, (128, 128))
    assert quantized.dtype == FP8 and quantized.shape == weight.shape
    assert scale.shape == (2, 3)  # the last row and column of blocks are partial
    back = dequantize_weight(quantized, scale, (128, 128), torch.float32)
    relative = ((back - weight).abs() / weight.abs().clamp(min=1e-3)).median()
    assert relative < 0.07  # e4m3 keeps 3 mantissa bits: half an ulp is 1/16
    assert (back[128:, 128:] - weight[128:, 128:]).abs().max() < 0.5  # not swamped by the large block


def test_a_pack_s_activations_are_each_sequence_s_own_quantization_laid_out_as_alone() -> None:
    """What each sequence's GEMM reads of a pack quantized at once: its values and scales as its own rows quantized
    alone give them, with their shapes and strides, each scale block 512 bytes from the next; rows of no sequence
    (filler, NaN here) reach no sequence's values. The Triton kernel's bits: tests/gpu/test_fp8_target_on_gpu.py."""
    spans = [(0, 37), (64, 128), (128, 129), (192, 250)]  # a padded tail, a multiple of 4, one token, the last
    generator = torch.Generator().manual_seed(0)
    rows = (torch.randn(256, 384, generator=generator) * torch.logspace(-3, 3, 384)).to(torch.bfloat16)
    filler = torch.ones(256, dtype=torch.bool)
    for start, end in spans:
        filler[start:end] = False
    rows[filler] = float("nan")
    layout = PackQuantization(spans, 256)
    assert layout.fits
    parts = layout.quantize(rows)  # quantize_pack's torch chain here (no Triton on a CPU-only host)
    (first_values, first_block) = parts[0]
    for (start, end), (values, block) in zip(spans, parts, strict=True):
        alone_values, alone_scales = quantize_activations(rows[start:end].clone())
        assert torch.equal(values.view(torch.uint8), alone_values.view(torch.uint8))
        assert torch.equal(block, alone_scales) and block.stride() == alone_scales.stride()
        assert values.data_ptr() - first_values.data_ptr() == start * 384  # its rows of the pack's
        assert (block.data_ptr() - first_block.data_ptr()) % 512 == 0


def test_a_pack_whose_padding_rows_would_overlap_the_next_sequence_is_not_quantized_at_once() -> None:
    assert not PackQuantization([(0, 5), (5, 9)], 16).fits  # starts aligned to fewer than 4 tokens
    assert PackQuantization([(0, 14)], 16).blocks == [(0, 14, 16, 0)]  # its 2 padding rows in the filler
    assert not PackQuantization([(0, 15)], 15).fits  # the padding would run past the pack


def test_the_checkpoint_has_the_release_layout_and_is_its_own_revision(tiny_model_dir: Path, fp8_dir: Path) -> None:
    config = json.loads((fp8_dir / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "fp8"
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    assert model_revision(fp8_dir) != model_revision(tiny_model_dir)
    spec = load_spec(fp8_dir, model_revision(fp8_dir), "cpu")
    assert spec.quantization == Fp8Scheme((128, 128))
    assert "128x128 blocks" in (spec.info().quantization or "")
    assert load_spec(tiny_model_dir, "r", "cpu").info().quantization is None


def test_converted_layers_hold_e4m3_and_the_narrow_ones_stay_bfloat16(fp8_dir: Path) -> None:
    loaded = load_weights(load_spec(fp8_dir, "r", "cpu"))
    layer = loaded.model.model.layers[0]
    assert isinstance(layer.mlp.gate_proj, Fp8Linear) and layer.mlp.gate_proj.weight.dtype == FP8
    assert isinstance(layer.linear_attn.in_proj_qkv, Fp8Linear)
    assert type(layer.linear_attn.in_proj_a) is nn.Linear  # one output per value head: too narrow for a block
    assert loaded.model.lm_head.weight.dtype == torch.bfloat16
    assert gemm_counts(loaded.model) == {"dequantised-linear": 50}  # on a CPU, whatever the shapes


def test_loading_the_checkpoint_equals_quantizing_the_bfloat16_model_in_place(
    tiny_model_dir: Path, fp8_dir: Path
) -> None:
    from_disk = load_weights(load_spec(fp8_dir, "r", "cpu")).model
    in_place = load_weights(load_spec(tiny_model_dir, "r", "cpu")).model
    assert quantize_in_place(in_place, Fp8Scheme()) == 50
    ids = torch.randint(5, 1000, (1, 48), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a = from_disk(ids, output_hidden_states=True).hidden_states
        b = in_place(ids, output_hidden_states=True).hidden_states
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_fp8_entries_name_the_quantization_and_audit_bit_for_bit(fp8_dir: Path, tiny_model_dir: Path, tmp_path):
    services = build_services(Settings(data_dir=tmp_path / "store", model_dir=fp8_dir, device="cpu"))
    try:
        samples = [{"token_ids": list(range(5 + i, 60 + 7 * i))} for i in range(5)]
        results = services.writer.extract(ExtractRequest(samples=samples, featureset=FEATURES)).results
        fingerprint = results[0].manifest.fingerprint
        assert fingerprint.quantization is not None and "e4m3" in fingerprint.quantization
        assert fingerprint.fp8_gemm == {"dequantised-linear": 50}
        assert {r.manifest.model_revision for r in results} == {model_revision(fp8_dir)}
        report = services.auditor.audit(len(samples))
        assert (report.total, report.reproduced) == (5, 5)
    finally:
        services.close()
    bf16 = build_services(Settings(data_dir=tmp_path / "bf16", model_dir=tiny_model_dir, device="cpu"))
    try:
        (plain,) = bf16.writer.extract(ExtractRequest(samples=samples[:1], featureset=FEATURES)).results
        assert plain.manifest.fingerprint.quantization is None and plain.manifest.fingerprint.fp8_gemm is None
        assert plain.manifest.content_hash != results[0].manifest.content_hash  # another target, other bits
    finally:
        bf16.close()


@pytest.mark.parametrize(
    ("quantization", "said"),
    [
        ({"quant_method": "awq", "bits": 4}, "only block-quantized FP8"),
        (
            {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "static"},
            "dynamic",
        ),
    ],
)
def test_a_quantization_not_run_here_is_refused_by_name(fp8_dir: Path, tmp_path: Path, quantization, said) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for file in fp8_dir.iterdir():
        (other / file.name).write_bytes(file.read_bytes())
    config = json.loads((other / "config.json").read_text())
    config["quantization_config"] = quantization
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelUnavailable, match=said):
        load_spec(other, "r", "cpu")
