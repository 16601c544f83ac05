"""The tiny Qwen3.5 used by tests and the demo: a real `Qwen3_5ForCausalLM` with toy dimensions, random weights
from a fixed seed and a byte-level BPE tokenizer trained here. Nothing is downloaded; building twice gives the same
files and so the same model_revision. `multimodal=True` writes the `Qwen3_5ForConditionalGeneration` layout that real
Qwen3.5/3.6 checkpoints use (weights under `model.language_model.*` plus a one-block vision tower).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5TextConfig,
)
from transformers.utils import logging as hf_logging

SEED = 20261130
VOCAB_SIZE = 1024
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- elif message['content'] -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)
# A fixed training text: code and prose like the prompts the demo and tests send.
_CORPUS = [
    "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print('FizzBuzz')\n",
    "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n"
    "    while lo <= hi:\n        mid = (lo + hi) // 2\n",
    "class Node:\n    def __init__(self, value, next=None):\n        self.value = value\n        self.next = next\n",
    "import json\nimport asyncio\nfrom collections import OrderedDict, deque\n\nasync def main() -> None:\n    pass\n",
    "Write a Python function that returns the shortest path in a graph using breadth-first search.",
    "Implement an LRU cache with get and put in O(1) time. Explain the data structures you use.",
    "The quick brown fox jumps over the lazy dog. Hidden states are the residual stream after each layer.",
    "Speculative decoding drafts several tokens with a small model and verifies them with the target model.",
    "matrix multiply: C[i][j] = sum(A[i][k] * B[k][j] for k in range(n)); return C  # O(n^3)",
    '{"key": [1, 2, 3], "nested": {"a": true, "b": null}, "text": "hello world"}',
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=65536,
    )


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(found, int), token
    return found


def text_config(tokenizer: PreTrainedTokenizerFast, num_layers: int = 8, head_dim: int = 16) -> Qwen3_5TextConfig:
    """`head_dim` 16 gives the 64-wide CPU model; 64 a 256-wide one whose shapes fla's GPU kernels are tuned for."""
    return Qwen3_5TextConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=4 * head_dim,
        intermediate_size=8 * head_dim,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=head_dim,
        linear_value_head_dim=head_dim,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,  # type: ignore[call-arg]  # a config field transformers' signature omits
        max_position_embeddings=65536,
        tie_word_embeddings=False,
        eos_token_id=token_id(tokenizer, "<|im_end|>"),
        pad_token_id=token_id(tokenizer, "<|endoftext|>"),
        dtype="bfloat16",
    )


def _randomise(model: torch.nn.Module) -> None:
    """Fixed-seed weights that make every layer matter (GPU.md's recipe, scaled for a 64-wide model)."""
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                param.copy_(torch.empty(param.shape).uniform_(1, 16, generator=generator).log())
            elif name.endswith("dt_bias"):
                param.fill_(1.0)
            elif "linear_attn.norm" in name:
                param.fill_(1.0)  # the gated norm multiplies by its weight: zero would silence every linear layer
            elif "norm" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)  # RMSNorms scale by 1 + weight
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.08)


def build_devmodel(out_dir: Path, multimodal: bool = False, num_layers: int = 8, head_dim: int = 16) -> Path:
    """Write the tiny model to `out_dir` and return it."""
    out_dir = Path(out_dir)
    hf_logging.disable_progress_bar()
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = text_config(tokenizer, num_layers, head_dim)
    torch.manual_seed(SEED)
    model: torch.nn.Module
    if multimodal:
        ids = functools.partial(token_id, tokenizer)
        full = Qwen3_5Config(
            text_config=config.to_dict(),
            vision_config={
                "depth": 1,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "patch_size": 4,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "out_hidden_size": config.hidden_size,
                "num_position_embeddings": 64,
            },
            image_token_id=ids("<|image_pad|>"),
            video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"),
            vision_end_token_id=ids("<|vision_end|>"),
            tie_word_embeddings=False,
        )
        model = Qwen3_5ForConditionalGeneration(full)
    else:
        model = Qwen3_5ForCausalLM(config)
    _randomise(model)
    model.to(torch.bfloat16)  # type: ignore[arg-type]  # in place; transformers' wrapped `to` is mistyped
    model.save_pretrained(out_dir)
    GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=False
    ).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
