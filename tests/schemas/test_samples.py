from __future__ import annotations

import pytest

from schemas.prompt_hash import prompt_hash
from schemas.samples import InvalidSampleError, parse_sample


@pytest.mark.parametrize(
    "raw",
    [
        {"text": "hello"},
        {"token_ids": [1, 2, 3]},
        {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": False}},
        {"id": "x", "text": "a", "completion": {"text": "b"}},
        {"text": "a", "completion": {"token_ids": [4]}},
        {"text": "a", "completion": {"greedy": {"max_new_tokens": 4}}},
    ],
)
def test_valid_samples(raw: dict) -> None:
    parsed = parse_sample(raw)
    assert parsed.prompt_hash == prompt_hash(raw)
    assert "id" not in parsed.identity


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"text": ""},
        {"text": 5},
        {"token_ids": []},
        {"token_ids": [1, -2]},
        {"token_ids": ["1"]},
        {"token_ids": [True]},
        {"text": "a", "token_ids": [1]},
        {"messages": []},
        {"messages": [{"content": "no role"}]},
        {"text": "a", "chat_template_kwargs": {}},
        {"text": "a", "completion": {}},
        {"text": "a", "completion": {"text": "b", "token_ids": [1]}},
        {"text": "a", "completion": {"greedy": {"max_new_tokens": 0}}},
        {"text": "a", "extra": 1},
        ["not", "an", "object"],
        "text",
    ],
)
def test_invalid_samples(raw: object) -> None:
    with pytest.raises(InvalidSampleError):
        parse_sample(raw, index=3)


def test_id_is_a_label_not_identity() -> None:
    assert prompt_hash({"id": "a", "text": "x"}) == prompt_hash({"id": "b", "text": "x"}) == prompt_hash({"text": "x"})
    assert prompt_hash({"text": "x"}) != prompt_hash({"text": "x "})
