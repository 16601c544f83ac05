"""The dataset index: compact, content-addressed, and refused when it is not the one asked for."""

from __future__ import annotations

import pytest

from schemas import datasets
from schemas.keys import FeatureKey


def keys(count: int, triples: int = 2) -> list[tuple[FeatureKey, int]]:
    return [
        (
            FeatureKey(
                prompt_hash=f"{i:064x}",
                model_revision="sha256:" + f"{i % triples:064x}",
                backend="fla" if i % 2 else "torch",
                featureset_id=f"{i % triples:016x}",
                content_hash="sha256:" + f"{i + 7:064x}",
            ),
            100 + i,
        )
        for i in range(count)
    ]


def test_round_trip_keeps_every_key_in_order() -> None:
    made = keys(50)
    body = datasets.encode("run-1", "2026-12-01T00:00:00Z", made)
    index = datasets.decode(body, datasets.dataset_id(body))
    assert [index.key(i) for i in range(len(index))] == [k for k, _ in made]
    assert index.tokens == sum(t for _, t in made) and index.header.name == "run-1"
    assert len(body) < 70 * 50 + 1000  # 70 bytes an entry, plus the header


def test_the_same_entries_give_the_same_id_and_others_another() -> None:
    stamp = "2026-12-01T00:00:00Z"
    one, again = datasets.encode("a", stamp, keys(10)), datasets.encode("a", stamp, keys(10))
    assert datasets.dataset_id(one) == datasets.dataset_id(again)
    assert datasets.dataset_id(datasets.encode("a", stamp, keys(10)[::-1])) != datasets.dataset_id(one)


def test_a_changed_byte_or_another_id_is_refused() -> None:
    body = datasets.encode("a", "2026-12-01T00:00:00Z", keys(10))
    wanted = datasets.dataset_id(body)
    for position in (2, 30, len(body) - 3):
        damaged = bytearray(body)
        damaged[position] ^= 1
        with pytest.raises(datasets.DatasetError):
            datasets.decode(bytes(damaged), wanted)
    with pytest.raises(datasets.DatasetError, match="not a dataset index"):
        datasets.decode(b"HSDX" + body[4:])


def test_only_whole_versions() -> None:
    key = FeatureKey(prompt_hash="a" * 64)
    with pytest.raises(datasets.DatasetError, match="whole versions"):
        datasets.encode("a", "2026-12-01T00:00:00Z", [(key, 1)])
