"""A content-addressed disk cache of verified feature bodies: size-bounded, least-recently-used first out, safe with
several processes (DataLoader workers) on one directory.

An entry is a full entry's body as it was received, stored under its content hash: a chunk body (`.hsck`: the stored
chunks, still compressed, with their index and write-time digests) or, for entries that came as safetensors, that
body. It is written to a temporary name and renamed into place (readers never see half a file), read through mmap
(no copy), and verified on every read, so a file damaged on disk is dropped, never served. A chunk body is decoded
and checked chunk by chunk on the client's decode pool, exactly as one arriving from the service, so a read from the
cache scales with cores (a safetensors body is checked by one sha256 over the whole entry, on one core). Recency
is the file's mtime, bumped on each hit; eviction holds an flock so two processes never evict at once, and a file
evicted under a reader stays readable through its mmap.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from client.errors import IntegrityError
from client.features import Features, decode_verified
from client.receive import decode_chunks
from schemas import wire
from schemas.files import atomic_write
from schemas.keys import is_content_hash

CHUNKS, SAFETENSORS = ".hsck", ".safetensors"
_FORMATS: dict[str, Callable[[mmap.mmap], Features]] = {CHUNKS: decode_chunks, SAFETENSORS: decode_verified}


class FeatureCache:
    def __init__(self, directory: Path | str, max_bytes: int = 64 * 1024**3) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "tmp").mkdir(exist_ok=True)
        self._lock_path = self.directory / ".lock"
        self._lock_path.touch(exist_ok=True)

    def _path(self, content_hash: str, suffix: str) -> Path:
        if not is_content_hash(content_hash):
            raise ValueError(f"not a content hash: {content_hash!r}")
        hexdigest = content_hash.removeprefix("sha256:")
        return self.directory / hexdigest[:2] / f"{hexdigest}{suffix}"

    def get(self, content_hash: str) -> Features | None:
        """The verified full entry, or None if it is not cached (or was damaged, and so dropped)."""
        for suffix, decode in _FORMATS.items():
            path = self._path(content_hash, suffix)
            try:
                with path.open("rb") as handle:
                    # copy-on-write: tensors over a safetensors body can be written to without touching the file
                    body = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
            except (FileNotFoundError, ValueError):
                continue
            try:
                features = decode(body)
            except IntegrityError:
                path.unlink(missing_ok=True)
                continue
            if features.content_hash != content_hash or not features.full:
                path.unlink(missing_ok=True)
                continue
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile: the mmap still holds it
                os.utime(path)  # most recently used
            return features
        return None

    def put(self, features: Features) -> None:
        """Keep a verified full entry received as safetensors, as that body; slices are not cached (their hash
        covers only themselves)."""
        if not features.full or self._has(features.content_hash):
            return
        manifest = features.manifest
        metadata = wire.served_metadata(
            manifest.model_dump_json(), features.layers, features.tokens, manifest.content_hash, True
        )
        self._write(
            self._path(features.content_hash, SAFETENSORS), wire.encode_parts(features.tensors.values(), metadata)
        )

    def put_chunks(self, features: Features, body: Sequence[bytes | memoryview]) -> None:
        """Keep a verified full entry's chunk body, as it was received (its pieces, one after another)."""
        if not features.full or self._has(features.content_hash):
            return
        self._write(self._path(features.content_hash, CHUNKS), body)

    def _has(self, content_hash: str) -> bool:
        return any(self._path(content_hash, suffix).exists() for suffix in _FORMATS)

    def _write(self, path: Path, body: Sequence[bytes | memoryview]) -> None:
        # a cache: a lost file costs a refetch, and every read is verified, so no fsync
        atomic_write(path, list(body), staging_dir=self.directory / "tmp", durable=False)
        self._evict()

    def size(self) -> int:
        return sum(p.stat().st_size for p in self._files())

    def _files(self) -> list[Path]:
        return [p for suffix in _FORMATS for p in self.directory.glob(f"??/*{suffix}") if p.is_file()]

    def _evict(self) -> None:
        with self._lock_path.open("rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entries = []
                for path in self._files():
                    try:
                        stat = path.stat()
                    except FileNotFoundError:
                        continue
                    entries.append((stat.st_mtime_ns, stat.st_size, path))
                total = sum(size for _, size, _ in entries)
                for _, size, path in sorted(entries):
                    if total <= self.max_bytes:
                        break
                    path.unlink(missing_ok=True)
                    total -= size
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
