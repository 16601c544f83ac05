"""`ProcessFeed`: batches assembled by worker processes, each collated, verified, straight into shared memory that
the training process maps: a loader that scales with the node's cores (one process's interpreter lock bounds it
otherwise, `client.training.feed_worker`) without a DataLoader's copy of every batch into fresh shared memory.

    with ProcessFeed(url, processes=6, cache_dir="/nvme/hsstore") as feed:
        for epoch in range(epochs):
            for batch in DeviceFeed(feed.batches(batches_of(epoch)), "cuda"):
                step(batch)

A batch is `pad_collate`'s. Its tensors lie in a worker's segment; the segment goes back to that worker when the
last tensor over it is dropped (a finalizer on the array they view: exact under any Python), never before, so a
batch a training step, a queue or a user still holds is never written under it. With `pin_memory`, every segment is
registered with CUDA once, and `DeviceFeed` copies batches from it to the GPU as they lie.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import subprocess
import sys
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import recv_handle
from pathlib import Path
from typing import Any

import numpy as np

from client.keys import KeyLike
from client.training.feed_worker import DONE, JOB, RELEASE, STOP, arrays_in
from client.training.torch_data import key_of
from schemas.manifest import Manifest

_POLL_S = 0.05  # how often a consumer waiting on a batch hands released segments back


class _Worker:
    def __init__(self, index: int, config: dict[str, Any]) -> None:
        ours, theirs = socket.socketpair()
        code = f"import sys; sys.path[:0] = {sys.path!r}; from client.training.feed_worker import main; main()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(theirs.fileno()), json.dumps(config)], pass_fds=[theirs.fileno()]
        )
        theirs.close()
        self.index = index
        self.conn = Connection(ours.detach())
        self.segments: dict[int, mmap.mmap] = {}
        self.outstanding = 0


class ProcessFeed:
    """Worker processes that turn batches of keys into collated, verified batches in shared memory."""

    def __init__(
        self,
        base_url: str,
        *,
        processes: int = 4,
        threads: int = 2,
        token: str | None = None,
        cache_dir: str | Path | None = None,
        cache_bytes: int = 64 * 1024**3,
        pin_memory: bool = False,
        keep_bytes: int = 8 * 1024**3,
    ) -> None:
        """`processes` workers, each assembling `threads` batches at once on its share of this process's cores (its
        CPU affinity, split in contiguous runs). `keep_bytes`: the shared memory each worker keeps for reuse."""
        if processes < 1 or threads < 1:
            raise ValueError("processes and threads must be at least 1")
        self.pin_memory = pin_memory
        self.ahead = processes * (threads + 1)
        cores = sorted(os.sched_getaffinity(0))
        shares = [cores[i * len(cores) // processes : (i + 1) * len(cores) // processes] for i in range(processes)]
        base = {
            "base_url": base_url,
            "token": token,
            "cache_dir": str(cache_dir) if cache_dir is not None else None,
            "cache_bytes": cache_bytes,
            "threads": threads,
            "keep_bytes": keep_bytes,
            "consumer_pid": os.getpid(),
        }
        self._workers = [
            _Worker(i, {**base, "cores": share if len(cores) >= processes else None}) for i, share in enumerate(shares)
        ]
        self._released: deque[tuple[int, int]] = deque()  # (worker, segment), appended by finalizers
        self._next_job = 0

    def batches(self, batches: Iterable[Sequence[Manifest | KeyLike]]) -> Iterator[dict[str, Any]]:
        """Each batch of keys as one collated batch, in order, up to `processes * (threads + 1)` assembled ahead."""
        todo = iter(batches)
        pending: dict[int, int] = {}  # job -> worker: sent, not yet in
        arrived: dict[int, Any] = {}  # job -> its batch, or the exception that is its outcome
        order: deque[int] = deque()  # the jobs sent and not yet yielded, in the order they are to be yielded
        exhausted = False
        try:
            while True:
                self._hand_back()  # on every batch: with every batch ahead already in, nothing else would
                while not exhausted and len(order) < self.ahead:
                    keys = next(todo, None)
                    if keys is None:
                        exhausted = True
                        break
                    if not keys:
                        raise ValueError("a batch of no keys")
                    order.append(self._submit([key_of(k) for k in keys], pending))
                if not order:
                    return
                while order[0] not in arrived:
                    self._receive(pending, arrived)
                job = order.popleft()
                outcome = arrived.pop(job)
                if isinstance(outcome, BaseException):
                    raise outcome
                yield outcome
                del outcome
        finally:
            try:
                while pending:  # a loop that stopped early: what is still being assembled is let go as it lands
                    self._receive(pending, arrived)
            except RuntimeError:  # a worker gone: the next use says so
                pass
            arrived.clear()
            self._hand_back()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (their CPU time is the loader's)."""
        return [w.process.pid for w in self._workers]

    def _submit(self, items: list, pending: dict[int, int]) -> int:
        worker = min(self._workers, key=lambda w: w.outstanding)
        job, self._next_job = self._next_job, self._next_job + 1
        try:
            worker.conn.send((JOB, job, items))
        except OSError:
            raise _gone(worker) from None
        worker.outstanding += 1
        pending[job] = worker.index
        return job

    def _receive(self, pending: dict[int, int], arrived: dict[int, Any]) -> None:
        self._hand_back()
        conns = {w.conn: w for w in self._workers}
        for ready in wait(list(conns), timeout=_POLL_S):
            worker = conns[ready]  # type: ignore[index]  # wait hands back the very connections it was given
            conn = worker.conn
            try:
                message = conn.recv()
            except (EOFError, OSError):  # its end of the socket closed: the process is gone
                raise _gone(worker) from None
            job = message[1]
            worker.outstanding -= 1
            pending.pop(job, None)
            arrived[job] = self._batch(worker, message) if message[0] == DONE else message[2]

    def _batch(self, worker: _Worker, message: tuple) -> dict[str, Any]:
        _, _, segment, size, new, layout, hashes, dropped = message
        if new:
            fd = recv_handle(worker.conn)
            worker.segments[segment] = mmap.mmap(fd, size)
            os.close(fd)
            if self.pin_memory:
                _register(worker.segments[segment], size)
        for gone in dropped:
            memory = worker.segments.pop(gone)
            if self.pin_memory:
                _unregister(memory)
        # a new array per batch: it lives exactly as long as the tensors over it (each views it), and so the finalizer
        batch = np.frombuffer(worker.segments[segment], dtype=np.uint8)
        weakref.finalize(batch, self._released.append, (worker.index, segment))
        return {**arrays_in(batch, layout), "content_hash": hashes}

    def _hand_back(self) -> None:
        while self._released:
            index, segment = self._released.popleft()
            with contextlib.suppress(OSError):  # a worker gone: the error comes with its batch
                self._workers[index].conn.send((RELEASE, segment))

    def close(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.conn.send((STOP,))
        for worker in self._workers:
            try:
                worker.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.process.kill()
            worker.conn.close()

    def __enter__(self) -> ProcessFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gone(worker: _Worker) -> RuntimeError:
    return RuntimeError(f"feed worker {worker.index} exited (code {worker.process.wait()}): its batches are lost")


def _register(memory: mmap.mmap, size: int) -> None:
    import torch

    address = np.frombuffer(memory, dtype=np.uint8).ctypes.data
    if torch.cuda.cudart().cudaHostRegister(address, size, 0) != 0:
        raise RuntimeError("cudaHostRegister failed for a feed segment")


def _unregister(memory: mmap.mmap) -> None:
    import torch

    torch.cuda.cudart().cudaHostUnregister(np.frombuffer(memory, dtype=np.uint8).ctypes.data)
