"""Writing a file so that readers see the old content or the new, never a part: the one way both sides do it.

(schemas/ is the only package the client and the service share, so this mechanism lives here with the contract.)
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable
from pathlib import Path

_OWNER = re.compile(r"\.~(\d+)\.")


def staging_path(directory: Path, name: str, suffix: str = "") -> Path:
    """A fresh staging name for `name` that records the writing process (see `staging_owner`)."""
    return directory / f"{name}.~{os.getpid()}.{uuid.uuid4().hex}{suffix}"


def staging_owner(path: Path) -> int | None:
    """The pid that made a staging name, so a sweep removes only what dead writers left."""
    found = _OWNER.search(path.name)
    return int(found[1]) if found else None


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path,
    data: bytes | memoryview | Iterable[bytes | memoryview],
    *,
    staging_dir: Path | None = None,
    durable: bool = True,
) -> None:
    """Write `data` (or its pieces, one after another) to a staging file (in `staging_dir`, else beside `path`),
    fsync it, rename it over `path`, fsync the directory. `durable=False` skips both fsyncs, for caches whose loss
    costs only a refetch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(staging_dir or path.parent, path.name, ".tmp")
    try:
        with staging.open("wb") as handle:
            pieces = [data] if isinstance(data, bytes | memoryview) else data
            for piece in pieces:
                handle.write(piece)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    if durable:
        fsync_dir(path.parent)
