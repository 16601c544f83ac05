"""The limits every JSON value a client sends is held to, checked before anything of ours recurses over it.

A sample is any JSON object within these limits (docs/design.md, "Limits"); a request body nests at most
`BODY_DEPTH` levels, which leaves room for a sample inside a request. Beyond them a client gets a 4xx naming the
limit, never a recursion error: Python's own JSON parser gives up near 1,000 levels and json.dumps near the same,
so an unchecked 500-level sample failed in the middle of hashing it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """How far one JSON value may reach. `depth`: arrays and objects within one another (`{}` and `[]` are 1,
    a scalar 0); `members`: items of one array or object; `string_chars`: characters of one string or member name;
    integers within `[-2**63, 2**64)`, what every JSON parser a trainer uses reads exactly (Arrow's int64/uint64)."""

    depth: int = 64
    members: int = 1 << 20  # token ids of the longest sequence any card holds, with room to spare
    string_chars: int = 1 << 24
    min_integer: int = -(1 << 63)
    max_integer: int = (1 << 64) - 1


SAMPLE_LIMITS = JsonLimits()
BODY_DEPTH = SAMPLE_LIMITS.depth + 8  # a request's own objects around the samples it carries


class JsonLimitError(ValueError):
    """A JSON value beyond one of the limits, a value JSON cannot carry, or not the kind of value asked for; the
    message names which."""


def check_depth(value: Any, limit: int = BODY_DEPTH, what: str = "the body") -> None:
    """Raise JsonLimitError if `value` (as json.loads gives it) nests arrays and objects deeper than `limit`.
    Iterative: it visits containers only, so a body of 10^6 token ids costs one pass over one list."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise JsonLimitError(f"{what} nests arrays and objects deeper than the limit of {limit} levels")
        stack.extend((child, depth + 1) for child in _items(node) if isinstance(child, dict | list))


def load_json(raw: bytes | str, what: str = "the body", depth: int = BODY_DEPTH) -> Any:
    """json.loads, total: any input gives a value nested at most `depth` levels, or a ValueError that says what is
    wrong (json.JSONDecodeError for text that is not JSON; JsonLimitError naming the limit it passes)."""
    try:
        value = json.loads(raw)
    except RecursionError:  # deeper than the parser goes: far past `depth`
        raise JsonLimitError(f"{what} nests arrays and objects deeper than the limit of {depth} levels") from None
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as exc:
        raise JsonLimitError(f"{what} is not UTF-8 text (byte {exc.start})") from None
    except ValueError:  # the one ValueError left: an integer of more digits than Python converts
        raise JsonLimitError(f"{what} holds an integer of more than {sys.get_int_max_str_digits()} digits") from None
    check_depth(value, depth, what)
    return value


def check_scalar(value: Any, limits: JsonLimits = SAMPLE_LIMITS) -> Any:
    """`value` if it is a JSON scalar within `limits`, else JsonLimitError. Python's bool is an int: asked first."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > limits.string_chars:
            raise JsonLimitError(f"a string of {len(value)} characters passes the limit of {limits.string_chars}")
        if not value.isascii():  # JSON text is UTF-8: a string with a lone surrogate (`"\ud83d"`) has no such form
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise JsonLimitError("a string holds a lone UTF-16 surrogate, which is not valid Unicode") from None
        return value
    if isinstance(value, int):
        if not limits.min_integer <= value <= limits.max_integer:
            raise JsonLimitError(
                f"an integer outside [-2**63, 2**64) (the limit of what JSON parsers read exactly): {_short(value)}"
            )
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JsonLimitError(f"{value} is not a JSON number (NaN means missing only as an object member's value)")
        return float(value)
    raise JsonLimitError(f"a {type(value).__name__} is a value JSON cannot carry")


def check_members(node: Mapping[Any, Any] | list[Any] | tuple[Any, ...], limits: JsonLimits = SAMPLE_LIMITS) -> None:
    if len(node) > limits.members:
        kind = "an object" if isinstance(node, Mapping) else "an array"
        raise JsonLimitError(f"{kind} of {len(node)} members passes the limit of {limits.members}")


def _short(value: int) -> str:
    digits = len(str(abs(value))) if value.bit_length() < 10_000 else value.bit_length() * 30103 // 100_000
    return f"an integer of about {digits} digits" if digits > 40 else str(value)


def _items(node: dict[Any, Any] | list[Any]) -> Any:
    return node.values() if isinstance(node, dict) else node
