"""Turning a sample into the token ids the model sees: chat template for messages, tokenizer for text, ids as given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schemas.samples import ParsedSample
from schemas.states import CompletionSource
from service.errors import InvalidSample, TooLarge


@dataclass(frozen=True, slots=True)
class EncodedPrompt:
    prompt_ids: list[int]
    completion_ids: list[int] | None  # None when a greedy completion is still to be generated
    completion_source: CompletionSource | None
    greedy_max_new_tokens: int | None = None


def _where(index: int | None) -> str:
    return "" if index is None else f"samples[{index}]: "


def _check_ids(ids: list[int], vocab_size: int, what: str, index: int | None) -> None:
    bad = next((i for i in ids if i >= vocab_size), None)
    if bad is not None:
        raise InvalidSample(
            f"{_where(index)}{what} holds token id {bad}, outside the model's vocabulary of {vocab_size}"
        )


def _render_messages(parsed: ParsedSample, tokenizer: Any, index: int | None) -> str:
    sample, identity = parsed.sample, parsed.identity  # the identity is what is rendered: null members left out
    kwargs: dict[str, Any] = dict(identity.get("chat_template_kwargs", {}))
    # With a completion the prompt ends where the assistant's answer starts; a conversation that already ends with
    # the assistant is taken as it is.
    last_role = identity["messages"][-1].get("role")
    kwargs.setdefault("add_generation_prompt", sample.completion is not None or last_role != "assistant")
    try:
        return str(tokenizer.apply_chat_template(identity["messages"], tokenize=False, **kwargs))
    except Exception as exc:  # jinja raises many kinds; any of them means this sample does not fit the template
        raise InvalidSample(f"{_where(index)}the chat template rejected these messages: {exc}") from None


def _tokenized(tokenizer: Any, texts: dict[int, str], special: bool) -> dict[int, list[int]]:
    """Each position's text tokenised, all in one call (a fast tokenizer's batch is the same ids, 2-3x quicker)."""
    if not texts:
        return {}
    backend = _plain_backend(tokenizer)
    if backend is not None:
        rows = [encoding.ids for encoding in backend.encode_batch(list(texts.values()), add_special_tokens=special)]
        return dict(zip(texts, rows, strict=True))
    ids = tokenizer(
        list(texts.values()), add_special_tokens=special, return_attention_mask=False, return_token_type_ids=False
    )["input_ids"]
    return {position: list(row) for position, row in zip(texts, ids, strict=True)}


def _plain_backend(tokenizer: Any) -> Any | None:
    """A fast tokenizer's Rust tokenizer where calling it is what transformers' call does for plain text (no
    truncation, no padding, special tokens split as the wrapper would): the same ids without the wrapper's
    conversion of each encoding, about a quarter of a job's tokenising time on short texts. None otherwise."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.truncation is not None or backend.padding is not None:
        return None
    if backend.encode_special_tokens != bool(getattr(tokenizer, "split_special_tokens", False)):
        return None
    return backend


def encode(
    parsed: ParsedSample, tokenizer: Any, vocab_size: int, max_tokens: int, index: int | None = None
) -> EncodedPrompt:
    return encode_many([parsed], tokenizer, vocab_size, max_tokens, index)[0]


def encode_many(
    parsed: Sequence[ParsedSample], tokenizer: Any, vocab_size: int, max_tokens: int, first: int | None = None
) -> list[EncodedPrompt]:
    """Each sample's token ids: texts as the tokenizer splits them (with its special tokens), messages as the chat
    template renders them, ids as given; the tokenizer called once per kind for the lot. `first`: the first
    sample's place in the request (errors name `samples[first + i]`)."""

    def where(position: int) -> int | None:
        return None if first is None else first + position

    texts, rendered, completions = {}, {}, {}
    for position, one in enumerate(parsed):
        sample = one.sample
        if sample.text is not None:
            texts[position] = sample.text
        elif sample.messages is not None:
            rendered[position] = _render_messages(one, tokenizer, where(position))
        if sample.completion is not None and sample.completion.text is not None:
            completions[position] = sample.completion.text
    prompts = _tokenized(tokenizer, texts, True) | _tokenized(tokenizer, rendered, False)
    completed = _tokenized(tokenizer, completions, False)
    return [
        _encoded(one, prompts.get(position), completed.get(position), vocab_size, max_tokens, where(position))
        for position, one in enumerate(parsed)
    ]


def _encoded(
    parsed: ParsedSample,
    prompt: list[int] | None,
    completion_text: list[int] | None,
    vocab_size: int,
    max_tokens: int,
    index: int | None,
) -> EncodedPrompt:
    sample = parsed.sample
    if sample.token_ids is not None:
        prompt = list(sample.token_ids)
        _check_ids(prompt, vocab_size, "token_ids", index)
    if not prompt:
        raise InvalidSample(f"{_where(index)}the prompt encodes to no tokens")
    completion: list[int] | None = None
    source: CompletionSource | None = None
    greedy: int | None = None
    if (c := sample.completion) is not None:
        if c.text is not None:
            completion, source = completion_text, CompletionSource.TEXT
        elif c.token_ids is not None:
            completion, source = list(c.token_ids), CompletionSource.TOKEN_IDS
            _check_ids(completion, vocab_size, "completion.token_ids", index)
        elif c.greedy is not None:
            greedy, source = c.greedy.max_new_tokens, CompletionSource.GREEDY_TARGET
    total = len(prompt) + (len(completion) if completion is not None else greedy or 0)
    if total > max_tokens:
        raise TooLarge(f"{_where(index)}{total} tokens exceed the limit of {max_tokens} tokens per sample")
    return EncodedPrompt(prompt, completion, source, greedy)
