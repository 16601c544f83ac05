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


def canonical_json(obj: Any) -> bytes:
    """docs/design.md's canonical form: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def normal_form(value: Any) -> Any:
    """`value` with every object member whose value is null (or NaN) left out, at every depth (list items keep their
    place), numpy values as plain lists and numbers."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):  # a numpy array or scalar, from pandas
        value = value.tolist()
    if isinstance(value, Mapping):
        return {key: normal_form(item) for key, item in value.items() if not _missing(item)}
    if isinstance(value, list | tuple):
        return [normal_form(item) for item in value]
    return value


def _missing(value: Any) -> bool:
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    return value is None or (isinstance(value, float) and math.isnan(value))


def sample_identity(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a sample that defines it, in its normal form: everything but its `id` label and null members.
    The service renders this (not the sample as sent) into the tokens it extracts, so a key names one computation."""
    return unlabelled(normal_form(sample))


def unlabelled(normal: Mapping[str, Any]) -> dict[str, Any]:
    """`sample_identity` of a sample already in its normal form (a parse has made it once): all but its `id`."""
    return {key: value for key, value in normal.items() if key != "id"}


def prompt_hash(sample: Mapping[str, Any]) -> str:
    """Lowercase hex sha256 of the canonical JSON of the sample's normal form (`sample_identity`)."""
    return identity_hash(canonical_json(sample_identity(sample)))


def identity_hash(canonical: bytes) -> str:
    """`prompt_hash` of a sample whose identity's canonical JSON is at hand (a parse has made it once)."""
    return hashlib.sha256(canonical).hexdigest()


def prompt_hash_as_sent(sample: Mapping[str, Any]) -> str:
    """The rule before the normal form (to 61ec308): the sample as sent, nulls and all, minus `id`. Only the
    catalog's re-keying and the rebuild of old manifest documents use it, to recognise what it named."""
    return hashlib.sha256(canonical_json({key: value for key, value in sample.items() if key != "id"})).hexdigest()
