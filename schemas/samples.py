"""Samples as docs/design.md defines them: one prompt form plus an optional completion, validated strictly.

A sample is validated and identified in its normal form (`schemas.prompt_hash.normal_form`: a null member is an
absent one), so a row that travelled through Arrow, which fills in the members other rows have with null, is the
sample it was. Validation never rewrites it further: client and service hash the same JSON without the service's
parsing getting in the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.json_limits import JsonLimitError
from schemas.prompt_hash import canonical_json, identity_hash, normal_form, unlabelled
from schemas.validation import describe_errors, exactly_one_of

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
NonEmptyText = Annotated[str, Field(min_length=1)]


class InvalidSampleError(ValueError):
    """A sample that does not follow docs/design.md's sample format; `index` is its place in a request."""

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(message if index is None else f"samples[{index}]: {message}")


class Message(BaseModel):
    # Chat messages may carry more than role and content (tool calls, reasoning): the template decides.
    model_config = ConfigDict(extra="allow", strict=True)

    role: NonEmptyText
    content: str | list[Any] | None = None


class Greedy(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    max_new_tokens: Annotated[int, Field(ge=1, le=65536)]


class Completion(BaseModel):
    """Exactly one of: literal text, token ids, or greedy generation by the target."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra=exactly_one_of("text", "token_ids", "greedy")
    )

    text: NonEmptyText | None = None
    token_ids: TokenIds | None = None
    greedy: Greedy | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Completion:
        given = [k for k in ("text", "token_ids", "greedy") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a completion has exactly one of text, token_ids, greedy (got {given or 'none'})")
        return self


class Sample(BaseModel):
    """A prompt as chat messages, plain text or token ids, plus an optional completion and an `id` label."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            **exactly_one_of("messages", "text", "token_ids"),
            # chat_template_kwargs only with messages
            "anyOf": [
                {"not": {"required": ["chat_template_kwargs"]}},
                {"properties": {"chat_template_kwargs": {"type": "null"}}},
                {"required": ["messages"], "properties": {"messages": {"not": {"type": "null"}}}},
            ],
        },
    )

    id: str | None = None
    messages: Annotated[list[Message], Field(min_length=1)] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    text: NonEmptyText | None = None
    token_ids: TokenIds | None = None
    completion: Completion | None = None

    @model_validator(mode="after")
    def _one_prompt_form(self) -> Sample:
        given = [k for k in ("messages", "text", "token_ids") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a sample has exactly one of messages, text, token_ids (got {given or 'none'})")
        if self.chat_template_kwargs is not None and self.messages is None:
            raise ValueError("chat_template_kwargs only applies to messages")
        return self


class ParsedSample:
    """A validated sample with its identity (its normal form minus `id`: what is hashed and rendered) and prompt
    hash."""

    __slots__ = ("identity", "prompt_hash", "sample")

    def __init__(self, sample: Sample, identity: dict[str, Any], prompt_hash: str) -> None:
        self.sample = sample
        self.identity = identity
        self.prompt_hash = prompt_hash

    @property
    def label(self) -> str | None:
        return self.sample.id


def parse_sample(raw: Any, index: int | None = None) -> ParsedSample:
    """Validate one sample; raise InvalidSampleError with a readable reason."""
    if not isinstance(raw, Mapping):
        raise InvalidSampleError(f"a sample is a JSON object, got {type(raw).__name__}", index)
    try:
        normal: dict[str, Any] = normal_form(raw)  # once: a job of 10^6 samples parses each twice
    except JsonLimitError as exc:
        raise InvalidSampleError(str(exc), index) from None
    identity = unlabelled(normal)
    canonical = canonical_json(identity)  # total now: the normal form holds only what JSON's UTF-8 text carries
    try:
        sample = Sample.model_validate(normal)
    except ValidationError as exc:
        reasons = describe_errors(exc.errors(include_url=False, include_input=False), model=Sample)
        raise InvalidSampleError(reasons, index) from None
    return ParsedSample(sample, identity, identity_hash(canonical))


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline_refs(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {key: _inline_refs(value, defs) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(value, defs) for value in node]
    return node


def _sample_json_schema() -> dict[str, Any]:
    """Sample's JSON schema with its definitions inlined, so API models can show it for fields kept as raw JSON."""
    schema = Sample.model_json_schema()
    inlined: dict[str, Any] = _inline_refs(schema, schema.get("$defs", {}))
    inlined["examples"] = SAMPLE_EXAMPLES
    return inlined


SAMPLE_EXAMPLES: list[dict[str, Any]] = [
    {"id": "fizzbuzz", "messages": [{"role": "user", "content": "Write fizzbuzz in Python."}]},
    {
        "messages": [{"role": "user", "content": "Sort a list."}],
        "chat_template_kwargs": {"enable_thinking": False},
        "completion": {"text": "sorted(xs)"},
    },
    {"text": "def merge(a, b):", "completion": {"greedy": {"max_new_tokens": 64}}},
    {"token_ids": [151644, 872, 198], "completion": {"token_ids": [9707, 0]}},
]
SAMPLE_JSON_SCHEMA = _sample_json_schema()
