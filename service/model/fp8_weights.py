"""Block-quantized FP8 targets: the layout of Qwen's own `-FP8` releases (e4m3 weights, one float32
`weight_scale_inv` per 128 x 128 block, activations quantized per token and 128 columns as they arrive).

transformers' fine-grained FP8 support is not what runs it here: it needs `accelerate`, fetches its GEMM kernel from
the Hub at the first forward (`kernels-community/finegrained-fp8`; nothing can be fetched on our GPU hosts) and on a
CPU dequantises the whole model to bfloat16 at load, so the target would no longer be the FP8 one. `Fp8Linear`
instead runs one of two GEMMs, named in every fingerprint (`gemm_counts`):

  scaled-mm-blockwise   torch's `scaled_mm` (cuBLAS's block-scaled FP8 GEMM): CUDA devices of compute capability
                        9.0 (H100/H200; cuBLAS has these recipes there only), both dimensions multiples of 128
  dequantised-linear    the weight dequantised to bfloat16 at each call, then torch's linear: every other device
                        and shape (the tiny test model's)

Each is deterministic for one shape, so an FP8 entry is audited bit for bit as a bfloat16 one is.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from service.model.fp8_activations import FP8, quantize_activations, scale_of

Gemm = Literal["scaled-mm-blockwise", "dequantised-linear"]
SCALE_SUFFIX = ".weight_scale_inv"
# The per-head projections of a Gated-DeltaNet layer have one output per value head (48 in the 27B): too narrow
# for a block, so they stay bfloat16, as the heads, norms, embeddings and lm_head do.
NOT_CONVERTED = ("lm_head", "embed_tokens", "linear_attn.in_proj_a", "linear_attn.in_proj_b")


@dataclass(frozen=True)
class Fp8Scheme:
    """A checkpoint's `quantization_config`, as far as it changes the bits."""

    block: tuple[int, int] = (128, 128)
    activations: str = "dynamic"

    @classmethod
    def of_config(cls, config: dict[str, Any] | None) -> Fp8Scheme | None:
        """None for a checkpoint that is not block-quantized FP8; ValueError for one of a kind not run here."""
        if not config:
            return None
        method, fmt = config.get("quant_method"), config.get("fmt", "e4m3")
        block = config.get("weight_block_size")
        if method != "fp8" or fmt != "e4m3" or not isinstance(block, list) or len(block) != 2:
            raise ValueError(
                f"quantization_config {json.dumps(config)[:200]}: only block-quantized FP8 (quant_method fp8, fmt "
                "e4m3, weight_block_size [n, k]) is run here"
            )
        if config.get("activation_scheme", "dynamic") != "dynamic":
            raise ValueError("quantization_config: only dynamic activation scales are run here")
        return cls((int(block[0]), int(block[1])))

    def config(self) -> dict[str, Any]:
        return {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": self.activations,
            "weight_block_size": list(self.block),
            "modules_to_not_convert": list(NOT_CONVERTED),
        }

    def describe(self) -> str:
        n, k = self.block
        return f"fp8 e4m3 weights in {n}x{k} blocks, {self.activations} activation scales per token and {k} columns"


def quantize_weight(weight: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 weight, float32 scales of its blocks): `weight ≈ fp8 * scale` block by block (the last blocks partial)."""
    n, k = weight.shape
    bn, bk = block
    rows, cols = -(-n // bn), -(-k // bk)
    padded = F.pad(weight.float(), (0, cols * bk - k, 0, rows * bn - n))
    blocks = padded.view(rows, bn, cols, bk)
    scale = scale_of(blocks.abs().amax(dim=(1, 3)))
    quantized = (blocks / scale[:, None, :, None]).view(rows * bn, cols * bk)[:n, :k].to(FP8)
    return quantized.contiguous(), scale.contiguous()


def dequantize_weight(
    weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor:
    n, k = weight.shape
    expanded = scale.repeat_interleave(block[0], 0)[:n].repeat_interleave(block[1], 1)[:, :k]
    return (weight.float() * expanded).to(dtype)


class Fp8Linear(nn.Module):
    """A bias-free linear layer held as e4m3 + block scales, run by the GEMM `gemm` names for where it lies."""

    mm_scale: torch.Tensor

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.block = block
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.weight_scale_inv = nn.Parameter(scale, requires_grad=False)
        # the scales as cuBLAS wants them (K blocks padded to a multiple of 4): a buffer, so that whatever copies a
        # layer's tensors (service/extraction/layer_graphs.py) copies these with the rest
        blocks_k = scale.shape[1]
        self.register_buffer("mm_scale", F.pad(scale, (0, -blocks_k % 4)).contiguous(), persistent=False)

    @property
    def gemm(self) -> Gemm:
        device = self.weight.device
        if (
            device.type == "cuda"
            and torch.cuda.get_device_capability(device) == (9, 0)
            and hasattr(F, "scaled_mm")
            and self.block == (128, 128)
            and self.in_features % 128 == 0
            and self.out_features % 128 == 0
        ):
            return "scaled-mm-blockwise"
        return "dequantised-linear"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gemm == "dequantised-linear":
            return F.linear(x, dequantize_weight(self.weight, self.weight_scale_inv, self.block, x.dtype))
        lead, k = x.shape[:-1], x.shape[-1]
        rows = x.reshape(-1, k)
        out = self.scaled_mm(*quantize_activations(rows), x.dtype)
        return out[: rows.shape[0]].view(*lead, self.out_features)

    def scaled_mm(
        self, quantized: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The block-scaled GEMM of activations `quantize_activations` made: [padded, N], into `out` when given
        (the out form runs the same kernel; a pack's rows take each sequence's product straight)."""
        if out is None:
            return F.scaled_mm(
                quantized,
                self.weight.t(),
                scales,
                F.ScalingType.BlockWise1x128,
                self.mm_scale.t(),
                F.ScalingType.BlockWise128x128,
                output_dtype=dtype,
            )
        # what F.scaled_mm calls, in its out form
        return torch._scaled_mm_v2(
            quantized,
            self.weight.t(),
            [scales],
            [F.ScalingType.BlockWise1x128.value],
            [],
            [self.mm_scale.t()],
            [F.ScalingType.BlockWise128x128.value],
            [],
            None,
            dtype,
            [],
            False,
            out=out,
        )


def _converted(name: str, module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) and module.bias is None and not any(skip in name for skip in NOT_CONVERTED)


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def quantize_in_place(model: nn.Module, scheme: Fp8Scheme) -> int:
    """Replace every linear layer the scheme converts with its FP8 form; how many were replaced. The bfloat16
    weights go as each is replaced (a 27B target does not hold both)."""
    names = [name for name, module in model.named_modules() if _converted(name, module)]
    for name in names:
        linear = model.get_submodule(name)
        assert isinstance(linear, nn.Linear)  # what _converted chose
        weight, scale = quantize_weight(linear.weight.data, scheme.block)
        _replace(model, name, Fp8Linear(weight, scale, scheme.block))
        del linear
    return len(names)


def _scaled_keys(model_dir: Path) -> Iterator[tuple[str, Any]]:
    """Each block-scale tensor's key in the checkpoint, with the open file that holds it."""
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key.endswith(SCALE_SUFFIX):
                    yield key, handle


def load_fp8_linears(model: nn.Module, model_dir: Path, scheme: Fp8Scheme) -> int:
    """After transformers loaded the checkpoint as bfloat16 (its e4m3 weights cast without their scales): every
    linear layer whose checkpoint has block scales gets its e4m3 weight and scales as they are stored. Checkpoint
    names may carry `model.language_model.` (the multimodal layout) where the text model has `model.`."""
    modules = dict(model.named_modules())
    replaced = 0
    for key, handle in _scaled_keys(model_dir):
        base = key.removesuffix(SCALE_SUFFIX)
        name = base.replace("model.language_model.", "model.", 1)
        linear = modules.get(name)
        if not isinstance(linear, nn.Linear):
            continue  # the vision tower's, or an MTP head's: not part of the text model
        device = linear.weight.device
        weight = handle.get_tensor(f"{base}.weight").to(device)
        scale = handle.get_tensor(key).to(device=device, dtype=torch.float32)
        if weight.dtype != FP8 or weight.shape != linear.weight.shape:
            raise ValueError(f"{base}: block scales beside a weight of {weight.dtype} {tuple(weight.shape)}")
        _replace(model, name, Fp8Linear(weight, scale, scheme.block))
        replaced += 1
    if not replaced:
        raise ValueError(f"{model_dir}: a quantization_config but no weight_scale_inv tensors")
    return replaced


def gemm_counts(model: nn.Module) -> dict[str, int]:
    """How many FP8 linear layers run each GEMM, where the model lies now (the fingerprint's `fp8_gemm`)."""
    return dict(sorted(Counter(m.gemm for m in model.modules() if isinstance(m, Fp8Linear)).items()))


def write_fp8_checkpoint(source: Path, out_dir: Path, scheme: Fp8Scheme | None = None) -> Path:
    """A bfloat16 checkpoint directory quantized as Qwen's `-FP8` releases are (the tiny test model's FP8 twin):
    e4m3 weights and their `weight_scale_inv`, the rest as it was, `quantization_config` in config.json."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    scheme = scheme or Fp8Scheme()
    source, out_dir = Path(source), Path(out_dir)
    with torch.device("meta"):  # only to learn which weights are those of converted linear layers
        text = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source, local_files_only=True))
    converted = {name for name, module in text.named_modules() if _converted(name, module)}
    out_dir.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file() and file.suffix != ".safetensors" and file.name != "config.json":
            (out_dir / file.name).write_bytes(file.read_bytes())
    for file in sorted(source.glob("*.safetensors")):
        out: dict[str, torch.Tensor] = {}
        for key, tensor in load_file(str(file)).items():
            base = key.removesuffix(".weight")
            if key.endswith(".weight") and base.replace("model.language_model.", "model.", 1) in converted:
                out[key], out[f"{base}{SCALE_SUFFIX}"] = quantize_weight(tensor, scheme.block)
            else:
                out[key] = tensor
        save_file(out, str(out_dir / file.name), metadata={"format": "pt"})
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = scheme.config()
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out_dir
