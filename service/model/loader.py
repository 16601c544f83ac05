"""Loading a local HF model directory of the qwen3_5 family, the tiny one and a 27B checkpoint alike, in two steps:
the spec (config, tokenizer, kernels, revision: cheap, at start-up) and the weights (on demand, on the GPU).

Real Qwen3.5/3.6 checkpoints are `Qwen3_5ForConditionalGeneration`; `AutoModelForCausalLM` builds the text-only
`Qwen3_5ForCausalLM` from them and remaps `model.language_model.*`, so the vision tower is never loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from schemas.api import ModelInfo
from schemas.backend import SINGLE_DEVICE, Backend
from schemas.samples import ParsedSample
from service.errors import ModelUnavailable
from service.model.encode import EncodedPrompt, encode, encode_many
from service.model.fp8_weights import Fp8Scheme, load_fp8_linears
from service.model.kernels import KernelSet
from service.model.placement import devices_of, spread_layers


@dataclass
class ModelSpec:
    """What is known of a model without its weights: enough to validate requests and label results."""

    path: Path | str  # as LoadedModel.path
    revision: str
    config: Any  # the text config
    architecture: str
    tokenizer: Any
    device: torch.device
    kernels: KernelSet
    weights_bytes: int
    quantization: Fp8Scheme | None = None  # a block-quantized FP8 checkpoint's scheme

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    def available_backends(self) -> list[str]:
        return self.kernels.available(self.device.type)

    def resolve_backend(self, requested: str) -> Backend:
        return self.kernels.resolve(requested, self.device.type)

    def encode(self, parsed: ParsedSample, max_tokens: int, index: int | None = None) -> EncodedPrompt:
        """Tokenise without the weights, so bad input is refused before any work."""
        return encode(parsed, self.tokenizer, self.vocab_size, max_tokens, index)

    def encode_many(self, parsed: Sequence[ParsedSample], max_tokens: int, first: int = 0) -> list[EncodedPrompt]:
        """`encode` for a batch, the tokenizer called once per kind (`samples[first + i]` in errors)."""
        return encode_many(parsed, self.tokenizer, self.vocab_size, max_tokens, first)

    def info(self) -> ModelInfo:
        return ModelInfo(
            path=str(self.path),
            model_revision=self.revision,
            architecture=self.architecture,
            num_layers=self.num_layers,
            hidden_size=int(self.config.hidden_size),
            vocab_size=self.vocab_size,
            dtype="bfloat16",
            device=str(self.device),
            quantization=self.quantization.describe() if self.quantization is not None else None,
        )


@dataclass
class LoadedModel:
    path: Path | str  # a model directory, or what names a model built in memory (`synthetic:…`)
    model: Any  # a transformers causal LM
    tokenizer: Any
    revision: str
    device: torch.device  # where inputs go: the first device of a spread model
    kernels: KernelSet
    device_map: str = SINGLE_DEVICE  # as fingerprints record it (service/model/placement.py)
    quantization: Fp8Scheme | None = None

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def body(self) -> Any:
        """The decoder stack: embed_tokens, layers, norm."""
        return self.model.model

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def spec(self) -> ModelSpec:
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return ModelSpec(
            self.path,
            self.revision,
            self.config,
            type(self.model).__name__,
            self.tokenizer,
            self.device,
            self.kernels,
            weights,
            self.quantization,
        )


def pick_device(setting: str) -> torch.device:
    """The device inputs go to (the first of `cuda:0,cuda:1`)."""
    return devices_of(setting)[0]


def load_spec(model_dir: Path, revision: str, device: str = "auto") -> ModelSpec:
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ModelUnavailable(f"{model_dir} is not a model directory (no config.json)")
    hf_logging.disable_progress_bar()
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    model_class: type[Any] = AutoModelForCausalLM._model_mapping[type(config)]  # type: ignore[assignment]  # what from_pretrained will build
    weights = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    quantization = getattr(config, "quantization_config", None)
    try:
        scheme = Fp8Scheme.of_config(quantization if isinstance(quantization, dict | None) else quantization.to_dict())
    except ValueError as exc:
        raise ModelUnavailable(f"{model_dir}: {exc}") from None
    return ModelSpec(
        path=model_dir,
        revision=revision,
        config=config.get_text_config(),
        architecture=model_class.__name__,
        tokenizer=AutoTokenizer.from_pretrained(model_dir, local_files_only=True),
        device=pick_device(device),
        kernels=KernelSet(sys.modules[model_class.__module__]),
        weights_bytes=weights,
        quantization=scheme,
    )


def load_weights(spec: ModelSpec, attn_implementation: str = "sdpa", devices: str | None = None) -> LoadedModel:
    """Onto the spec's device; with `devices` naming several (`cuda:0,cuda:1`), loaded on the CPU and spread."""
    spread = devices_of(devices) if devices and "," in devices else None
    # Straight onto an accelerator (needs accelerate there); on the CPU no device map is needed.
    on_cpu = spec.device.type == "cpu" or spread is not None
    placement: dict[str, Any] = {} if on_cpu else {"device_map": {"": spec.device}}
    verbosity = hf_logging.get_verbosity()
    if spec.quantization is not None:
        # loaded as bfloat16 by transformers, without its FP8 quantizer (service/model/fp8_weights.py says why),
        # then each converted layer's e4m3 weight and scales put in as stored
        config = AutoConfig.from_pretrained(spec.path, local_files_only=True)
        del config.quantization_config
        placement["config"] = config
        hf_logging.set_verbosity_error()  # its load report would list every weight_scale_inv as unexpected
    try:
        model = AutoModelForCausalLM.from_pretrained(
            spec.path,
            dtype=torch.bfloat16,
            attn_implementation=attn_implementation,
            local_files_only=True,
            **placement,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    if spec.quantization is not None:
        load_fp8_linears(model, Path(spec.path), spec.quantization)
    model.eval()
    model.requires_grad_(False)
    device_map = spread_layers(model, spread) if spread is not None else SINGLE_DEVICE
    kernels = KernelSet.for_model(model)
    return LoadedModel(
        spec.path, model, spec.tokenizer, spec.revision, spec.device, kernels, device_map, spec.quantization
    )
