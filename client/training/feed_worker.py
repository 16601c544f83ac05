"""A `ProcessFeed` worker: a process of its own that fetches batches of entries and collates each, verified, straight
into shared memory it hands to the consumer by file descriptor (a memfd: nothing in the file system to leak).

One process cannot feed a training node: on the 16-core GPU host one client process on 12 cores delivered 9.4 GB/s
from the disk cache and 4.4 from the service, the same 12 cores as 2 to 6 processes 15.8 and 7.0 (2026-12-01,
`benchmarks/feed.py`'s measurement run in that many processes at once): the per-chunk Python work serialises on one
interpreter's lock.

A segment is written only while the consumer does not hold it: the worker takes a free one (or maps a new one) for a
batch, tells the consumer where the batch lies once every chunk of it is checked, and writes into that segment again
only after the consumer has said it was released (`RELEASE`, sent when the last tensor over it was dropped).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from math import prod
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle
from typing import Any

import numpy as np
import torch

from client.host_memory import rounded

ALIGN = 64  # each array of a batch starts on a cache line
Layout = list[tuple[str, str, tuple[int, ...], int]]  # (name, torch dtype name, shape, offset)


# messages, consumer to worker: (JOB, job, items), (RELEASE, segment), (STOP,)
# worker to consumer: (DONE, job, segment, size, new, layout, content_hashes, dropped) (new: its fd follows),
# (FAILED, job, exception)
class Kind(StrEnum):
    """What a message between a consumer and a worker is."""

    JOB = "job"
    RELEASE = "release"
    STOP = "stop"
    DONE = "done"
    FAILED = "failed"


JOB, RELEASE, STOP, DONE, FAILED = Kind


def placed(layout: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> tuple[Layout, int]:
    """Each array's offset in one segment, and the bytes the batch takes."""
    out, at = [], 0
    for name, (shape, dtype) in layout.items():
        out.append((name, str(dtype).removeprefix("torch."), tuple(shape), at))
        at += -(-(prod(shape) * dtype.itemsize) // ALIGN) * ALIGN  # rounded up to a cache line
    return out, at


def arrays_in(memory: Any, layout: Layout) -> dict[str, torch.Tensor]:
    """The batch's tensors over `memory` (a uint8 numpy array): views, nothing copied."""
    arrays = {}
    for name, dtype_name, shape, at in layout:
        dtype = getattr(torch, dtype_name)
        view = memory[at : at + prod(shape) * dtype.itemsize]
        arrays[name] = torch.from_numpy(view).view(dtype).view(shape)
    return arrays


@dataclass
class _Segment:
    id: int
    size: int
    fd: int
    memory: mmap.mmap
    sent: bool = False  # its fd has gone to the consumer


@dataclass
class _Segments:
    """The worker's segments: each either free or holding a batch the consumer has not released."""

    keep_bytes: int
    free: dict[int, _Segment] = field(default_factory=dict)
    held: dict[int, _Segment] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)  # released past `keep_bytes`, not yet told to the consumer
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 0

    def take(self, nbytes: int) -> _Segment:
        with self.lock:
            fitting = [s for s in self.free.values() if s.size >= nbytes]
            if fitting:
                segment = min(fitting, key=lambda s: s.size)
                del self.free[segment.id]
            else:
                size = max(rounded(nbytes), mmap.PAGESIZE)
                fd = os.memfd_create(f"hsstore-feed-{self.next_id}", os.MFD_CLOEXEC)
                os.ftruncate(fd, size)
                segment = _Segment(self.next_id, size, fd, mmap.mmap(fd, size))
                self.next_id += 1
            self.held[segment.id] = segment
            return segment

    def release(self, segment_id: int) -> None:
        with self.lock:
            segment = self.held.pop(segment_id)
            kept = sum(s.size for s in (*self.free.values(), *self.held.values()))
            if kept + segment.size <= self.keep_bytes:
                self.free[segment.id] = segment
                return
            self.dropped.append(segment.id)  # the consumer unmaps its mapping when told
            with contextlib.suppress(BufferError):  # a failed batch's views may linger: then it goes with them
                segment.memory.close()

    def told(self) -> list[int]:
        with self.lock:
            dropped, self.dropped = self.dropped, []
            return dropped


def serve(conn: Connection, config: dict[str, Any]) -> None:
    """Answer the consumer's jobs until it says STOP (or goes away)."""
    from client.cache import FeatureCache
    from client.client import FeatureClient
    from client.training.collate import pad_into, pad_layout
    from client.training.torch_data import fetch_sample, retrying

    if config["cores"]:
        os.sched_setaffinity(0, config["cores"])
    torch.set_num_threads(1)  # the decode pool is the parallelism
    cache = FeatureCache(config["cache_dir"], config["cache_bytes"]) if config["cache_dir"] else None
    client = FeatureClient(config["base_url"], config["token"], cache=cache)
    segments = _Segments(config["keep_bytes"])
    sending = threading.Lock()

    def send(message: tuple, segment: _Segment | None = None) -> None:
        with sending:
            conn.send(message)
            if segment is not None and not segment.sent:
                send_handle(conn, segment.fd, config["consumer_pid"])
                os.close(segment.fd)
                segment.sent = True

    def run(job: int, items: list) -> None:
        segment = None
        try:
            samples = [retrying(fetch_sample, client, item) for item in items]
            layout, nbytes = placed(pad_layout(samples))
            segment = segments.take(nbytes)
            batch = pad_into(samples, arrays_in(np.frombuffer(segment.memory, dtype=np.uint8, count=nbytes), layout))
            hashes = batch.pop("content_hash")
            del batch  # its tensors are the only views of the segment here: none outlives the batch
            send((DONE, job, segment.id, segment.size, not segment.sent, layout, hashes, segments.told()), segment)
        except BaseException as exc:  # the consumer raises it in the training loop
            if segment is not None:
                segments.release(segment.id)
            send((FAILED, job, _picklable(exc)))

    with ThreadPoolExecutor(config["threads"], thread_name_prefix="hsstore-feed") as pool:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == STOP:
                break
            if message[0] == RELEASE:
                segments.release(message[1])
            else:
                pool.submit(run, message[1], message[2])
    client.close()


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # any exception that does not travel is described instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def main() -> None:
    import json

    fd, config = int(sys.argv[1]), json.loads(sys.argv[2])
    serve(Connection(fd), config)


if __name__ == "__main__":
    main()
