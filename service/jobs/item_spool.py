"""A job's prepared samples between the one pass that prepares them and the transaction that inserts them: on disk,
a batch at a time, so a job of 10^6 samples is neither held in memory nor prepared inside the catalog's write
transaction (which on SQLite holds every other writer, and this process's catalog, until it commits)."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import Any

from service.catalog.jobs.records import NewItem

BATCH = 5_000  # samples a pickle holds


class ItemSpool:
    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115  # closed by __exit__; gone if the process dies
        self._batch: list[tuple[int, Any, str, int | None]] = []

    def add(self, index: int, sample: Any, prompt_hash: str, greedy_tokens: int | None) -> None:
        self._batch.append((index, sample, prompt_hash, greedy_tokens))
        if len(self._batch) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            pickle.dump(self._batch, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._batch = []

    def items(self, backends: list[str]) -> Iterator[NewItem]:
        """Every sample added, in order, once per backend (read back a batch at a time)."""
        self._flush()
        self._file.seek(0)
        while True:
            try:
                batch = pickle.load(self._file)  # our own file, written above: nothing foreign is unpickled
            except EOFError:
                return
            for index, sample, prompt_hash, greedy in batch:
                yield from (NewItem(index, backend, sample, prompt_hash, greedy) for backend in backends)

    def __enter__(self) -> ItemSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()
