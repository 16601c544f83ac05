"""A Qwen3.5-27B-shaped target with random weights, built in seconds on the GPU (GPU.md's recipe): a faithful
stand-in for speed, memory and kernel behaviour where no weights can be downloaded. It enters the service as a
LoadedModel, so from there on it takes the same code path as a checkpoint loaded from disk."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

from schemas.model_revision import synthetic_revision
from service.model.devmodel import build_tokenizer
from service.model.fp8_weights import Fp8Scheme, quantize_in_place
from service.model.kernels import KernelSet
from service.model.loader import LoadedModel

QWEN3_5_27B: dict[str, Any] = {
    "vocab_size": 248320,
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 64,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 48,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "tie_word_embeddings": False,
    "max_position_embeddings": 262144,
}


def build_synthetic(device: str = "cuda", num_layers: int = 64, seed: int = 0) -> LoadedModel:
    shape = {**QWEN3_5_27B, "num_hidden_layers": num_layers}
    config = Qwen3_5TextConfig(**shape)
    config._attn_implementation = "sdpa"
    # bfloat16 from the start: materialised in float32 first, the 64-layer model took 108 GB, more than an H100 has;
    # the weights are the same either way (they are drawn below, into the bfloat16 parameters)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model = model.to_empty(device=device)
    model.to(torch.bfloat16)  # type: ignore[arg-type]  # what the meta init made in float32 anyway; in place
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("A_log"):
                param.copy_(
                    torch.log(torch.empty_like(param, dtype=torch.float32).uniform_(1, 16, generator=generator))
                )
            elif name.endswith("dt_bias"):
                param.fill_(1.0)
            elif "linear_attn.norm" in name:
                param.fill_(1.0)  # zero would silence every linear-attention layer and hide backend differences
            elif "norm" in name:
                param.zero_()  # RMSNorm scales by 1 + weight
            else:
                param.normal_(0, 0.02, generator=generator)
    # The rotary frequencies are computed at init, which the meta device skipped; float32 as a loaded model has them.
    model.model.rotary_emb = Qwen3_5TextRotaryEmbedding(config).to(device)
    model.eval().requires_grad_(False)
    revision = synthetic_revision(shape, seed)
    return LoadedModel(
        f"synthetic:qwen3.5-27b-shape/{num_layers}-layers",
        model,
        build_tokenizer(),
        revision,
        torch.device(device),
        KernelSet.for_model(model),
    )


def to_fp8(loaded: LoadedModel, scheme: Fp8Scheme | None = None) -> int:
    """The synthetic target quantized in place as Qwen's `-FP8` releases are (its bfloat16 weights go layer by layer),
    under the revision such a checkpoint would have: how many linear layers were converted."""
    scheme = scheme or Fp8Scheme()
    converted = quantize_in_place(loaded.model, scheme)
    shape = {**QWEN3_5_27B, "num_hidden_layers": loaded.config.num_hidden_layers}
    loaded.quantization = scheme
    loaded.revision = synthetic_revision({**shape, **scheme.config()}, 0)
    if loaded.device.type == "cuda":
        torch.cuda.empty_cache()
    return converted
