"""Tokenising through the fast tokenizer's Rust half gives the ids transformers' call gives, and the wrapper is used
wherever calling the Rust half would differ (truncation or padding set on it, special tokens split otherwise)."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.samples import parse_sample
from service.model import encode as encode_module
from service.model.encode import encode_many
from service.model.loader import LoadedModel

TEXTS = [
    "hello world",
    "  two leading spaces",
    "<|im_start|>user\nhi<|im_end|>",
    "naïve café 🤖 — ünïcödé",
    "a\tb\r\nc",
    "def f(x):\n    return x + 1",
    "x" * 3000,
]


def _through_wrapper(tokenizer: Any, special: bool) -> list[list[int]]:
    found = tokenizer(TEXTS, add_special_tokens=special, return_attention_mask=False, return_token_type_ids=False)
    return [list(row) for row in found["input_ids"]]


def _encoded(tokenizer: Any, samples: list[dict]) -> list[list[int]]:
    parsed = [parse_sample(sample) for sample in samples]
    return [one.prompt_ids for one in encode_many(parsed, tokenizer, 1 << 30, 1 << 20)]


@pytest.mark.parametrize("special", [True, False], ids=["texts, special tokens added", "rendered messages"])
def test_the_rust_tokenizer_gives_the_wrappers_ids(tiny_loaded: LoadedModel, special: bool) -> None:
    tokenizer = tiny_loaded.tokenizer
    assert encode_module._plain_backend(tokenizer) is not None  # the path under test is the one taken
    found = encode_module._tokenized(tokenizer, dict(enumerate(TEXTS)), special)
    assert [found[i] for i in range(len(TEXTS))] == _through_wrapper(tokenizer, special)


def test_a_tokenizer_with_truncation_set_goes_through_the_wrapper(tiny_loaded: LoadedModel) -> None:
    tokenizer = tiny_loaded.tokenizer
    backend = tokenizer.backend_tokenizer
    backend.enable_truncation(max_length=4)
    try:
        assert encode_module._plain_backend(tokenizer) is None
        ids = _encoded(tokenizer, [{"text": text} for text in TEXTS])
    finally:
        backend.no_truncation()
    assert ids == _through_wrapper(tokenizer, True)  # the wrapper turns truncation off for a plain call
    assert max(len(row) for row in ids) > 4
