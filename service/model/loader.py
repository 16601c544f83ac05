"""Loading a local HF model directory of the qwen3_5 family, the tiny one and a 27B checkpoint alike.

Real Qwen3.5/3.6 checkpoints are `Qwen3_5ForConditionalGeneration`; `AutoModelForCausalLM` builds the text-only
`Qwen3_5ForCausalLM` from them and remaps `model.language_model.*`, so the vision tower is never loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from schemas.api import ModelInfo
from service.errors import ModelUnavailable
from service.model.kernels import KernelSet


@dataclass
class LoadedModel:
    path: Path
    model: Any  # a transformers causal LM
    tokenizer: Any
    revision: str
    device: torch.device
    kernels: KernelSet

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

    def info(self) -> ModelInfo:
        return ModelInfo(
            path=str(self.path),
            model_revision=self.revision,
            architecture=type(self.model).__name__,
            num_layers=self.num_layers,
            hidden_size=int(self.config.hidden_size),
            vocab_size=int(self.config.vocab_size),
            dtype=str(self.model.dtype).removeprefix("torch."),
            device=str(self.device),
        )


def pick_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def load_model(model_dir: Path, revision: str, device: str = "auto", attn_implementation: str = "sdpa") -> LoadedModel:
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ModelUnavailable(f"{model_dir} is not a model directory (no config.json)")
    target = pick_device(device)
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    # Straight onto an accelerator (needs accelerate there); on the CPU no device map is needed.
    placement: dict[str, Any] = {} if target.type == "cpu" else {"device_map": {"": target}}
    model = AutoModelForCausalLM.from_pretrained(
        model_dir,
        dtype=torch.bfloat16,
        attn_implementation=attn_implementation,
        local_files_only=True,
        **placement,
    )
    model.eval()
    model.requires_grad_(False)
    return LoadedModel(model_dir, model, tokenizer, revision, target, KernelSet.for_model(model))
