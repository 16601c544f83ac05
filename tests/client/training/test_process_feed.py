"""`ProcessFeed`: batches collated by worker processes into shared memory, against a real server."""

from __future__ import annotations

import gc
import os
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from client import FeatureCache, FeatureClient, IntegrityError, ProcessFeed, fetch_sample, pad_collate
from client.chunk_checks import DeferredCopy
from tests.support.flipping_proxy import FlippingProxy


@pytest.fixture
def stored(client: FeatureClient) -> list:
    samples = [{"id": f"s{i}", "text": "def handler(event): return event " * (i + 1)} for i in range(8)]
    client.extract(samples, featureset=["embed", 1, 2, 5])
    return sorted(client.entries(), key=lambda m: m.seq)


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert torch.equal(got[name], value) if isinstance(value, torch.Tensor) else got[name] == value, name


def _batches(stored: list) -> list[list]:
    """Whole entries, a token range beside a whole entry, and two entries' layers 5 and 1 (in that order)."""
    keys = [m.feature_key() for m in stored]
    part = [{**k.model_dump(exclude_none=True), "layers": [5, 1]} for k in keys[6:8]]
    return [keys[0:3], keys[3:5], [{**keys[0].model_dump(exclude_none=True), "tokens": (1, 6)}, keys[5]], part]


@pytest.mark.parametrize("source", ["service", "cache"])
def test_every_batch_is_pad_collates_bit_for_bit(live_url: str, stored: list, tmp_path: Path, source: str) -> None:
    batches = _batches(stored)
    with FeatureClient(live_url) as client:
        want = [pad_collate([fetch_sample(client, k) for k in keys]) for keys in batches]
    cache = tmp_path / "cache" if source == "cache" else None
    if cache is not None:  # the second epoch's source: filled first
        with FeatureClient(live_url, cache=FeatureCache(cache)) as filling:
            filling.get_many([k for keys in batches for k in keys])
    with ProcessFeed(live_url, processes=2, threads=2, cache_dir=cache) as feed:
        for _ in range(2):  # the second epoch reuses the first's segments
            for got, expected in zip(feed.batches(batches), want, strict=True):
                _same(got, expected)


def test_a_batch_held_is_never_written_and_memory_is_reused_once_let_go(live_url: str, stored: list) -> None:
    """What the consumer holds keeps its bits while the worker goes on filling (its segments are others); a
    batch let go goes back, so a loop that drops each batch maps no new segment. One worker: with two, which
    batches (of which sizes) each gets depends on timing, and a worker whose free segments are all smaller than the
    batch it is given maps a new one, so no fixed count holds for two."""
    batches = _batches(stored) * 4
    with FeatureClient(live_url) as client:
        want = [pad_collate([fetch_sample(client, k) for k in keys]) for keys in batches]
    with ProcessFeed(live_url, processes=1, threads=2) as feed:
        held = list(feed.batches(batches))
        for _ in feed.batches(batches):  # a whole epoch more while every batch of the first is held
            pass
        for got, expected in zip(held, want, strict=True):
            _same(got, expected)
        mapped = sum(len(w.segments) for w in feed._workers)
        assert mapped >= len(batches)  # each held batch has a segment of its own
        del held, got
        gc.collect()
        for _ in range(3):
            for got in feed.batches(batches):
                del got
        assert sum(len(w.segments) for w in feed._workers) <= mapped  # nothing new mapped: reused


def test_a_consumer_slower_than_the_workers_gets_its_memory_reused(live_url: str, stored: list) -> None:
    """Every batch ahead is in before the consumer asks: the segments it let go still go back, so the workers
    map no more than the batches that can be alive at once (those ahead, the one held, one handed back late)."""
    with ProcessFeed(live_url, processes=1, threads=1) as feed:
        for batch in feed.batches(_batches(stored) * 4):
            time.sleep(0.3)
            del batch
        assert len(feed._workers[0].segments) <= feed.ahead + 2


def test_a_flipped_byte_fails_the_batch_in_the_training_loop(live_url: str, stored: list) -> None:
    host, port = live_url.removeprefix("http://").split(":")
    proxy = FlippingProxy((host, int(port)), lambda n: n // 2)
    try:
        with ProcessFeed(proxy.url, processes=1, threads=1) as feed, pytest.raises(IntegrityError):
            list(feed.batches([[stored[3].feature_key()]]))
    finally:
        proxy.close()


def test_a_loop_that_stops_early_leaves_the_feed_usable(live_url: str, stored: list) -> None:
    batches = _batches(stored) * 3
    with FeatureClient(live_url) as client:
        first = pad_collate([fetch_sample(client, k) for k in batches[0]])
    with ProcessFeed(live_url, processes=2, threads=1) as feed:
        for _ in feed.batches(batches):
            break
        _same(next(iter(feed.batches(batches))), first)


def test_a_worker_that_dies_is_an_error_not_a_hang(live_url: str, stored: list) -> None:
    with ProcessFeed(live_url, processes=1, threads=1) as feed:
        os.kill(feed._workers[0].process.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="feed worker 0 exited"):
            list(feed.batches(_batches(stored)))


class _SlowCopy(DeferredCopy):
    """A deferred copy whose chunks land late, the first of which fails its check."""

    def __init__(self, rows: int, fails: bool) -> None:
        self.name, self.dtype, self.shape, self.fails = "hidden_states", "bfloat16", (rows, 2, 4), fails
        self.pool, self.started = ThreadPoolExecutor(2), []

    def start_copy(self, out: np.ndarray) -> list[Future]:
        def land() -> bool:
            time.sleep(0.3)
            out[...] = 1
            return True

        self.started = [self.pool.submit(land) for _ in range(2)]
        return self.started

    def finish(self, copying: list[Future]) -> None:
        if self.fails:
            raise IntegrityError("hidden_states: a chunk differs")
        for future in copying:
            future.result()


def test_a_failed_collate_leaves_no_copy_writing_into_its_memory() -> None:
    """A worker reuses a failed batch's segment at once: every copy into it has ended when the error is raised."""
    sources = [_SlowCopy(3, fails=True), _SlowCopy(5, fails=False)]
    samples = [
        {"hidden_states": s, "input_ids": torch.zeros(s.shape[0], dtype=torch.int32), "content_hash": f"h{i}"}
        for i, s in enumerate(sources)
    ]
    with pytest.raises(IntegrityError):
        pad_collate(samples)
    assert all(future.done() for s in sources for future in s.started)  # each took 0.3 s: waited for
