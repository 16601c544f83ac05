"""The identity of a sample: sha256 over its canonical JSON, with the human `id` label left out."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """docs/design.md's canonical form: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sample_identity(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a sample that defines it: everything but its `id` label."""
    return {key: value for key, value in sample.items() if key != "id"}


def prompt_hash(sample: Mapping[str, Any]) -> str:
    """Lowercase hex sha256 of the canonical JSON of `sample` without `id`."""
    return hashlib.sha256(canonical_json(sample_identity(sample))).hexdigest()
