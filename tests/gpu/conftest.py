"""What each GPU test module leaves behind is given back to the card before the next builds its model: its fixtures'
models and pools go, then the caching allocator's free blocks (which it keeps for this process otherwise, and which a
second process, such as a trainer's in test_exact_on_gpu.py, could then not have on an 80 GB card)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch


def give_back() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@pytest.fixture(autouse=True, scope="module")
def _card_given_back() -> Iterator[None]:
    yield
    give_back()
