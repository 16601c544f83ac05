"""Samples as a client could send them, for Hypothesis: drawn from the sample format (every prompt form, completions,
messages with extra fields, `chat_template_kwargs`) and from arbitrary JSON around it (unicode, lone surrogates,
nulls and NaN where Arrow and pandas put them, huge numbers, deep and wide nesting), plus the Python values a
caller's dict may hold (numpy scalars and arrays, tuples, bytes). And the paths a sample takes to a key, each
giving an `Outcome`: the key, or a refusal.

The generative tests (tests/hsstore/test_identity_fuzz.py) and the 10^5-example run (benchmarks/identity_fuzz.py)
share these, so the benchmark runs what the suite runs, only longer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from schemas.json_limits import BODY_DEPTH, SAMPLE_LIMITS
from schemas.samples import InvalidSampleError, parse_sample

VOCAB = 1024  # the tiny model's: token ids at or past it are the service's to refuse, not the format's

# -- scalars ---------------------------------------------------------------------------------------------------------
_EDGE_INTEGERS = [
    0,
    VOCAB - 1,
    VOCAB,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**30,
]
_ODD_TEXT = ["", "\ud83d", "a\udc00b", "\x00", "é", "😀", "\u2028", '"\\', "{}[]", "null", "NaN"]
texts = st.text(max_size=24) | st.sampled_from(_ODD_TEXT)
member_names = st.text(max_size=12) | st.sampled_from(["id", "role", "content", "text", "token_ids", "\ud800"])
# more digits than Python's JSON parser converts (built when drawn: Hypothesis cannot print it as a constant)
_TOO_LONG = st.builds(lambda: 10**4301)
integers = st.integers(-(2**70), 2**70) | st.sampled_from(_EDGE_INTEGERS) | _TOO_LONG
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, -0.0, 1e308, 5.0])
scalars = st.none() | st.booleans() | integers | floats | texts


def _wrap(value: Any, kind: str, depth: int) -> Any:
    for _ in range(depth):
        value = [value] if kind == "array" else {"a": value}
    return value


_DEPTHS = st.integers(0, 8) | st.sampled_from(
    [SAMPLE_LIMITS.depth - 3, SAMPLE_LIMITS.depth - 1, SAMPLE_LIMITS.depth, BODY_DEPTH - 2, BODY_DEPTH, 300, 900, 5000]
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(member_names, inner, max_size=4), max_leaves=12
)
deep_values = st.tuples(json_values, st.sampled_from(["array", "object"]), _DEPTHS).map(lambda t: _wrap(*t))
wide_values = st.integers(0, 5000).map(lambda n: list(range(n)))  # token ids of a long prompt
any_json = json_values | deep_values | wide_values

# -- samples from the format: well-formed ones (arbitrary JSON only where the format takes any), then broken ones -----
good_ids = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12)
content_parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2)
_EXTRA_NAMES = st.sampled_from(["reasoning_content", "name", "tool_call_id", "tool_calls", "weight", "x"])
good_messages = st.builds(
    lambda role, content, extra: {"role": role, "content": content, **extra},
    st.sampled_from(["user", "assistant", "system"]),
    st.text(min_size=1, max_size=24) | st.none() | content_parts,
    st.dictionaries(_EXTRA_NAMES, any_json, max_size=2),
)
good_completions = st.one_of(
    st.fixed_dictionaries({"text": st.text(min_size=1, max_size=24)}),
    st.fixed_dictionaries({"token_ids": good_ids}),
    st.fixed_dictionaries({"greedy": st.fixed_dictionaries({"max_new_tokens": st.integers(1, 3)})}),
)
good_prompts = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(good_messages, min_size=1, max_size=3)},
        optional={"chat_template_kwargs": st.dictionaries(member_names, any_json, max_size=3)},
    ),
    st.fixed_dictionaries({"text": st.text(min_size=1, max_size=24)}),
    st.fixed_dictionaries({"token_ids": good_ids}),
)
_GOOD_OPTIONAL = {
    "id": st.text(max_size=12),
    "completion": good_completions,
    "nulls": st.just(None),  # a member Arrow filled in
    "missing": st.just(math.nan),  # a cell pandas marked missing
}
well_formed = st.builds(
    lambda prompt, more: {**prompt, **more}, good_prompts, st.fixed_dictionaries({}, optional=_GOOD_OPTIONAL)
)

token_ids = good_ids | st.lists(st.integers(0, VOCAB + 2), max_size=12) | st.lists(any_json, max_size=3)
contents = texts | st.none() | content_parts | any_json
roles = st.sampled_from(["user", "assistant", "system", "tool"]) | texts | any_json
messages = st.builds(
    lambda role, content, extra: {"role": role, "content": content, **extra},
    roles,
    contents,
    st.dictionaries(_EXTRA_NAMES, any_json, max_size=2),
)
completions = st.one_of(
    good_completions,
    st.fixed_dictionaries({"text": texts}),
    st.fixed_dictionaries({"token_ids": token_ids}),
    st.fixed_dictionaries({"greedy": st.fixed_dictionaries({"max_new_tokens": integers})}),
    any_json,
)
prompts = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(messages, min_size=0, max_size=3)},
        optional={"chat_template_kwargs": st.dictionaries(member_names, any_json, max_size=3) | any_json},
    ),
    st.fixed_dictionaries({"text": texts}),
    st.fixed_dictionaries({"token_ids": token_ids}),
)
_OPTIONAL = {**_GOOD_OPTIONAL, "id": texts | any_json, "completion": completions, "unknown": any_json}
broken = st.builds(lambda prompt, more: {**prompt, **more}, prompts, st.fixed_dictionaries({}, optional=_OPTIONAL))
samples = well_formed | broken
json_samples = samples | json_values  # a sample, or any JSON at all where one is expected


def _python(value: Any, how: int) -> Any:
    """A caller's dict may hold what pandas and numpy hand out instead of JSON's own types."""
    if isinstance(value, list) and value and all(type(v) is int and 0 <= v < 2**62 for v in value):
        return np.asarray(value) if how == 0 else tuple(value)
    if type(value) is int and abs(value) < 2**62:
        return np.int64(value) if how == 1 else value
    if isinstance(value, str) and how == 2:
        return value.encode("utf-8", "surrogatepass")  # bytes: not JSON
    return value


def pythonised(sample: Any, how: int) -> Any:
    """`sample` with its token-id lists as numpy arrays (or tuples) and its integers as numpy scalars (or its
    strings as bytes), as `how` (0, 1, 2) says; one level of members deep."""
    if not isinstance(sample, dict):
        return sample
    return {key: _python(value, how) for key, value in sample.items()}


python_samples = st.builds(pythonised, samples, st.integers(0, 2))


# -- outcomes --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What one path made of a sample: its prompt hash, or a refusal (`why`: the status and message)."""

    key: str | None
    why: str = ""

    @property
    def refused(self) -> bool:
        return self.key is None


def local_outcome(sample: Any) -> Outcome:
    """The contract's own answer, with no service: `parse_sample` (the format and the JSON limits)."""
    try:
        return Outcome(parse_sample(sample).prompt_hash)
    except InvalidSampleError as exc:
        return Outcome(None, str(exc))


def wire_json(sample: Any) -> str | None:
    """The JSON text a client sends for `sample` (None: no JSON text has it, e.g. an integer of 10^4301)."""
    try:
        return json.dumps({"samples": [sample]})
    except (TypeError, ValueError, RecursionError):
        return None
