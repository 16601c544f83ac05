"""Versions drawn at random from a catalog of any size at the cost of a few index reads each: a key space chosen by
its share of the versions, a seq drawn within its range, and the first version at or after it (read through the
(space, seq) index by the engine's code). Versions after a gap in a key space's seqs are a little likelier."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

Row = TypeVar("Row")
Found = TypeVar("Found")


def draw(
    weights: dict[int, int],
    bounds: dict[int, tuple[int, int]],
    count: int,
    at_or_after: Callable[[int, int], tuple[int, Row] | None],
    decode: Callable[[Row], Found],
    seed: int | None = None,
    accept: Callable[[Found], bool] | None = None,
) -> list[Found]:
    """Up to `count` distinct versions, in seq order: `weights` a key space's versions, `bounds` its (lowest, highest)
    seq, `at_or_after(space, seq)` the (seq, row) of the first version there (None past the end), `decode` a row
    into its version (only a row not drawn before); `accept` turns a drawn version down (drawing again)."""
    rng = random.Random(seed)
    order, shares = list(weights), list(weights.values())
    wanted = min(count, sum(shares))
    chosen: dict[int, Found] = {}
    for _ in range(8 * wanted + 64):  # enough draws for a sample of most of a small store, then stop
        if len(chosen) >= wanted:
            break
        space = rng.choices(order, shares)[0]
        low, high = bounds[space]
        found = at_or_after(space, rng.randint(low, high))
        if found is None or found[0] in chosen:
            continue
        seq, row = found
        version = decode(row)
        if accept is None or accept(version):
            chosen[seq] = version
    return [chosen[seq] for seq in sorted(chosen)]
