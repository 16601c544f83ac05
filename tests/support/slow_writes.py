"""Fault injection for the crash tests, kept out of the production path: blobs that take a while to write.

In a test process, `slow_writes(seconds)` (a context manager) makes the local store pause after writing the first
array of every blob. `python -m tests.support.slow_writes serve` (or `worker`) runs that hsstore command with the
pause that HSSTORE_TEST_WRITE_PAUSE_S names, in the local store and the object store alike, for tests that kill it
mid-write.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from service.storage import object_store, zarr_local

PAUSE_ENV = "HSSTORE_TEST_WRITE_PAUSE_S"
FIRST_ARRAY = "hidden_states"  # arrays are written in name order: this one comes first


def _pausing(write_array: Any, seconds: float) -> Any:
    def write(path: Any, *args: Any, **kwargs: Any) -> Any:
        result = write_array(path, *args, **kwargs)
        if path.name == FIRST_ARRAY:
            time.sleep(seconds)
        return result

    return write


@contextlib.contextmanager
def slow_writes(seconds: float) -> Iterator[None]:
    original = zarr_local.write_array
    zarr_local.write_array = _pausing(original, seconds)
    try:
        yield
    finally:
        zarr_local.write_array = original


def _pausing_encode(encode_array: Any, seconds: float) -> Any:
    def encode(data: Any, *args: Any, **kwargs: Any) -> Any:
        if data.ndim < 3:  # the object store puts arrays as it encodes them: hidden_states (3-D, first) is out
            time.sleep(seconds)
        return encode_array(data, *args, **kwargs)

    return encode


if __name__ == "__main__":
    from hsstore.cli import app

    pause = float(os.environ[PAUSE_ENV])
    zarr_local.write_array = _pausing(zarr_local.write_array, pause)
    object_store.encode_array = _pausing_encode(object_store.encode_array, pause)
    app()
