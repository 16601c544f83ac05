"""The identity of a sample: sha256 over the canonical JSON of its normal form, which leaves out the human `id` label
and every member whose value is null.

Why null is absent: a sample reaches the service through JSON over HTTP, a JSONL file, a Python dict, or a row of a
Ray Dataset, a parquet file or a pandas frame. Arrow gives every row of a block one schema and fills a member another
row has with null, so `{"role": "user", "content": "hi"}` travels as `{..., "reasoning_content": null}` next to a
row that reasons. No field of the sample format gives null a meaning of its own (every optional field's default is
null), so the two are one sample and must be one key; a list keeps its null items, which hold a place. pandas marks
a missing cell NaN, not null, and hands out numpy arrays and scalars: no field of a sample is a float, so NaN is
absent too, and a numpy value is the list or number it holds.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from schemas.json_limits import SAMPLE_LIMITS, JsonLimitError, JsonLimits, check_members, check_scalar

# json.dumps with options builds an encoder per call (a fifth of a job's hashing, #63); this one is json.dumps's
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(obj: Any) -> bytes:
    """docs/design.md's canonical form: sorted keys, no whitespace, UTF-8 kept as is."""
    return _CANONICAL.encode(obj).encode("utf-8")


def normal_form(value: Any, limits: JsonLimits = SAMPLE_LIMITS) -> Any:
    """`value` with every object member whose value is null (or NaN) left out, at every depth (list items keep their
    place), numpy values as plain lists and numbers, tuples as lists.

    Total over what a client can send: a value within `limits` (schemas/json_limits.py) has a normal form, anything
    else raises JsonLimitError naming the limit. Iterative, with the depth bounded as it descends, so no input reaches
    a recursion limit here or in the canonical JSON made from the result."""
    root: list[Any] = [None]
    # (what to copy, the container that receives it, its slot there, its depth): each container is made and given
    # its slots when met, so members keep their order whatever order the stack visits them in
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    while stack:
        source, parent, slot, depth = stack.pop()
        source = _plain(source)
        if not isinstance(source, Mapping | list | tuple):
            parent[slot] = check_scalar(source, limits)
            continue
        if depth + 1 > limits.depth:
            raise JsonLimitError(f"a sample nests arrays and objects deeper than the limit of {limits.depth} levels")
        check_members(source, limits)
        if isinstance(source, Mapping):
            out: dict[str, Any] = {}
            parent[slot] = out
            for key, item in source.items():
                if not (type(key) is str and key.isascii() and len(key) <= limits.string_chars):
                    _check_name(key, limits)
                if _plain_scalar(item, limits):  # most members: copied here, not by a round on the stack
                    out[key] = item
                elif not _missing(item := _plain(item)):
                    out[key] = None
                    stack.append((item, out, key, depth + 1))
        elif _flat_integers(source, limits):  # token ids: checked in one pass in C, not a step a number
            parent[slot] = list(source)
        else:
            parent[slot] = items = [None] * len(source)
            stack.extend((item, items, index, depth + 1) for index, item in enumerate(source))
    return root[0]


def _plain_scalar(item: Any, limits: JsonLimits) -> bool:
    """An ASCII string, a bool or an integer within the limits: nothing to check further or to convert."""
    kind = type(item)
    if kind is str:
        return item.isascii() and len(item) <= limits.string_chars
    return kind is bool or (kind is int and limits.min_integer <= item <= limits.max_integer)


def _check_name(key: Any, limits: JsonLimits) -> None:
    if not isinstance(key, str):
        raise JsonLimitError(f"an object's member names are strings, not {type(key).__name__}")
    check_scalar(key, limits)


def _plain(value: Any) -> Any:
    """A numpy array or scalar (pandas hands them out) as the list or number it holds."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return value.tolist()
    return value


def _flat_integers(items: list[Any] | tuple[Any, ...], limits: JsonLimits) -> bool:
    if not items or not all(type(item) is int for item in items):
        return False
    return bool(limits.min_integer <= min(items) and max(items) <= limits.max_integer)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def sample_identity(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a sample that defines it, in its normal form: everything but its `id` label and null members.
    The service renders this (not the sample as sent) into the tokens it extracts, so a key names one computation."""
    normal = normal_form(sample)
    if not isinstance(normal, dict):
        raise JsonLimitError(f"a sample is a JSON object, not a {type(normal).__name__}")
    return unlabelled(normal)


def unlabelled(normal: Mapping[str, Any]) -> dict[str, Any]:
    """`sample_identity` of a sample already in its normal form (a parse has made it once): all but its `id`."""
    return {key: value for key, value in normal.items() if key != "id"}


def prompt_hash(sample: Mapping[str, Any]) -> str:
    """Lowercase hex sha256 of the canonical JSON of the sample's normal form (`sample_identity`). Total: a
    ValueError naming what is wrong for anything without a key (past a JSON limit, not JSON, a lone surrogate)."""
    return identity_hash(canonical_json(sample_identity(sample)))


def identity_hash(canonical: bytes) -> str:
    """`prompt_hash` of a sample whose identity's canonical JSON is at hand (a parse has made it once)."""
    return hashlib.sha256(canonical).hexdigest()


def prompt_hash_as_sent(sample: Mapping[str, Any]) -> str:
    """The rule before the normal form (to 61ec308): the sample as sent, nulls and all, minus `id`. Only the
    catalog's re-keying and the rebuild of old manifest documents use it, to recognise what it named."""
    return hashlib.sha256(canonical_json({key: value for key, value in sample.items() if key != "id"})).hexdigest()
