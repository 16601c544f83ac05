"""A service whose GPU SGLang owns outside downtime windows: the SGLang stand-in served live, one ordered log of what
it received and what the service's model manager did, and the settings that join them (fixtures for every test module:
a warm job's life, its hand-over, its metrics and its status page)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer
from tests.support.sglang_standin import SGLangStandIn


class EventLog(list):
    """One ordered log for what SGLang received and what the service's model manager did."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def append(self, event: str) -> None:  # type: ignore[override]
        with self._lock:
            super().append(event)


@pytest.fixture
def events() -> EventLog:
    return EventLog()


@pytest.fixture
def standin(tiny_loaded: LoadedModel, events: EventLog) -> Iterator[tuple[SGLangStandIn, str]]:
    server = SGLangStandIn(tiny_loaded, events)
    with LiveServer(server.app) as url:
        yield server, url


@pytest.fixture
def windowed_settings(tmp_path: Path, tiny_model_dir: Path, standin: tuple[SGLangStandIn, str]) -> Settings:
    """SGLang owns the GPU outside windows and lends it through its memory saver."""
    return Settings(
        data_dir=tmp_path / "store",
        model_dir=tiny_model_dir,
        device="cpu",
        handover="memory_saver",
        sglang_url=standin[1],
        job_batch_size=2,
        memory_wait_s=5,
        handover_timeout_s=30,
    )


def subsequence(log: list[str], expected: list[str]) -> bool:
    """Does `expected` occur in `log` in this order (other events may come between)?"""
    position = 0
    for event in log:
        if position < len(expected) and event == expected[position]:
            position += 1
    return position == len(expected)
