"""Validation errors in a user's words: where, then what, and a field named once."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.api import BatchRequest, FeatureRead
from schemas.validation import describe_errors

HASH = "a" * 64


def words(build: object) -> str:
    with pytest.raises(ValidationError) as caught:
        build()  # type: ignore[operator]
    return describe_errors(caught.value.errors(include_url=False, include_input=False))


def test_a_message_that_names_its_field_is_not_prefixed_with_it_again() -> None:
    assert words(lambda: FeatureRead(prompt_hash=HASH, tokens="x")) == "tokens must look like 'a:b', got 'x'"
    batch = words(lambda: BatchRequest(keys=[{"prompt_hash": HASH}, {"prompt_hash": HASH, "tokens": "x"}]))
    assert batch == "keys.1: tokens must look like 'a:b', got 'x'"


def test_other_messages_say_where_first() -> None:
    assert words(lambda: FeatureRead(prompt_hash=HASH, layers=[])).startswith("layers: needs at least 1 item")
