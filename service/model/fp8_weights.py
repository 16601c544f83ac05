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

import functools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

Gemm = Literal["scaled-mm-blockwise", "dequantised-linear"]
FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448
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


def _scale_of(amax: torch.Tensor) -> torch.Tensor:
    """A block's float32 scale, amax / 448 by IEEE division (the bits `fp8_kernels` reproduces): divided by a
    tensor, not the scalar, because torch divides by a scalar on CUDA as a multiply by its reciprocal."""
    return (amax / torch.full_like(amax, FP8_MAX)).clamp(min=torch.finfo(torch.float32).tiny)


def quantize_weight(weight: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 weight, float32 scales of its blocks): `weight ≈ fp8 * scale` block by block (the last blocks partial)."""
    n, k = weight.shape
    bn, bk = block
    rows, cols = -(-n // bn), -(-k // bk)
    padded = F.pad(weight.float(), (0, cols * bk - k, 0, rows * bn - n))
    blocks = padded.view(rows, bn, cols, bk)
    scale = _scale_of(blocks.abs().amax(dim=(1, 3)))
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


def padded_rows(m: int) -> int:
    """The rows the block-scaled GEMM runs for `m` tokens: cuBLAS wants a multiple of 4."""
    return m + -m % 4


def quantize_activations(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`rows` [M, K] as `Fp8Linear.scaled_mm` takes them: per token and 128 columns, padded to `padded_rows(M)`."""
    return _row_quantizer()(rows if rows.stride(-1) == 1 else rows.contiguous(), padded_rows(rows.shape[0]))


class PackQuantization:
    """Where each sequence of a pack keeps its quantized activations, laid out as `quantize_activations` lays out the
    sequence's own: its values in its rows of the pack's [P, K] e4m3, its padding rows in the filler after it, and its
    scales token-major in a block of their own, 512 bytes aligned as a fresh tensor is. `quantize` makes them for the
    whole pack at once (one launch for every sequence; each token's values and scales are computed from that token
    alone, so they are its sequence's own call's)."""

    ALIGN = 128  # rows of scales: a block starts 128 floats (512 bytes) from another whatever the width

    def __init__(self, spans: list[tuple[int, int]], tokens: int) -> None:
        self.tokens = tokens
        self.blocks: list[tuple[int, int, int, int]] = []  # (start, tokens, padded rows, its scale block's first row)
        plan = torch.full((tokens, 4), -1, dtype=torch.int32)
        base = 0
        self.fits = True
        for start, end in spans:
            padded = padded_rows(end - start)
            if start + padded > tokens or bool((plan[start : start + padded, 0] >= 0).any()):
                self.fits = False  # another sequence's rows (starts aligned to fewer than 4 tokens)
                break
            plan[start : start + padded] = torch.tensor([0, end - start, padded, base], dtype=torch.int32)
            plan[start : start + padded, 0] = torch.arange(padded, dtype=torch.int32)
            self.blocks.append((start, end - start, padded, base))
            base += padded + -padded % self.ALIGN
        self.scale_rows = base
        self._plan = plan
        self._on_device: dict[torch.device, torch.Tensor] = {}

    def plan(self, device: torch.device) -> torch.Tensor:
        """[P, 4] int32 per row: its row in its sequence's padded rows (-1: no sequence's), the sequence's tokens, its
        padded rows, and its scale block's first row; on `device`, copied up once."""
        if device not in self._on_device:
            staged = self._plan.pin_memory() if device.type == "cuda" else self._plan
            self._on_device[device] = staged.to(device, non_blocking=True)
        return self._on_device[device]

    def quantize(self, rows: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each sequence's (e4m3 [padded, K], float32 scales [padded, K / 128]) of the pack's `rows` [P, K], each
        as `quantize_activations` of its rows alone gives them: the same values, shapes and strides."""
        return self.parts(*_pack_quantizer()(rows if rows.stride(-1) == 1 else rows.contiguous(), self))

    def parts(self, quantized: torch.Tensor, scales: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each sequence's views of a pack's e4m3 [P, K] and flat scales [scale_rows * K / 128]."""
        groups = quantized.shape[1] // 128
        return [
            (
                quantized[start : start + padded],
                scales[base * groups : (base + padded) * groups].view(groups, padded).t(),
            )
            for start, _, padded, base in self.blocks
        ]


def quantize_pack(rows: torch.Tensor, layout: PackQuantization) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch chain's `PackQuantization.quantize`, a sequence at a time (where Triton is missing): (e4m3 [P, K],
    float32 scales [scale_rows * K / 128])."""
    quantized = torch.empty(rows.shape, dtype=FP8, device=rows.device)
    scales = torch.empty(layout.scale_rows * (rows.shape[1] // 128), dtype=torch.float32, device=rows.device)
    for (start, tokens, padded, _), (values, block) in zip(layout.blocks, layout.parts(quantized, scales), strict=True):
        alone_values, alone_scales = quantize_rows(rows[start : start + tokens], padded)
        values.copy_(alone_values)
        block.copy_(alone_scales)
    return quantized, scales


def quantize_rows(rows: torch.Tensor, padded: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The activations as the block-scaled GEMM takes them: (e4m3 [padded, K], float32 scales [padded, K / 128]
    token-major), per token and 128 columns scale = amax / 448; rows past M zero with scale 1 (cuBLAS wants a
    multiple of 4 tokens). The reference `fp8_kernels.quantize_rows` reproduces in one pass."""
    m, k = rows.shape
    grouped = F.pad(rows, (0, 0, 0, padded - m)).float().view(padded, k // 128, 128)
    scale = _scale_of(grouped.abs().amax(dim=-1))
    if padded > m:
        scale[m:] = 1.0
    return (grouped / scale[..., None]).to(FP8).view(padded, k), scale.t().contiguous().t()


@functools.cache
def _row_quantizer() -> Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]:
    """Triton's one-pass kernel where Triton is installed (always, beside a CUDA build of torch), else the chain."""
    try:
        from service.model import fp8_kernels
    except ImportError:
        return quantize_rows
    return fp8_kernels.quantize_rows


@functools.cache
def _pack_quantizer() -> Callable[[torch.Tensor, PackQuantization], tuple[torch.Tensor, torch.Tensor]]:
    """Triton's one launch for the pack where Triton is installed, else the chain a sequence at a time."""
    try:
        from service.model import fp8_kernels
    except ImportError:
        return quantize_pack
    return lambda rows, layout: fp8_kernels.quantize_pack(rows, layout.plan(rows.device), layout.scale_rows)


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
