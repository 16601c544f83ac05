"""A content-addressed disk cache of verified feature bodies: size-bounded, least-recently-used first out, safe with
several processes (DataLoader workers) on one directory.

An entry is a full entry's decoded tensors with its manifest (a safetensors body), stored under its content hash. It
is written to a temporary name and renamed into place (readers never see half a file), read in place through mmap
(no decode, no copy: the tensors are views of the page cache, as `torch.load(mmap=True)` gives), and verified on
every read against the chunk digests recorded when the entry was written, chunk by chunk on the decode pool (an
entry without them by its sha256 content hash, on one core), so a file damaged on disk is dropped, never served.
Keeping the chunks still compressed instead was measured on the GPU host's 16 cores: decoding them again capped a
process at ~2.3 GB/s (bitshuffle + lz4 costs more per byte than the hash). Recency is the file's mtime, bumped on
each hit; eviction holds an flock so two processes never evict at once, and a file evicted under a reader stays
readable through its mmap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import mmap
import os
from pathlib import Path

from client.chunk_checks import CheckedCopy, verify_decoded
from client.errors import IntegrityError
from client.features import Features, decode_verified
from schemas import datasets, safetensors_body
from schemas.datasets import DatasetIndex
from schemas.files import atomic_write
from schemas.keys import is_content_hash
from schemas.manifest import HIDDEN_SCALES


class FeatureCache:
    def __init__(self, directory: Path | str, max_bytes: int = 64 * 1024**3) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "tmp").mkdir(exist_ok=True)
        self._lock_path = self.directory / ".lock"
        self._lock_path.touch(exist_ok=True)

    def _path(self, content_hash: str) -> Path:
        if not is_content_hash(content_hash):
            raise ValueError(f"not a content hash: {content_hash!r}")
        hexdigest = content_hash.removeprefix("sha256:")
        return self.directory / hexdigest[:2] / f"{hexdigest}.safetensors"

    def get(self, content_hash: str) -> Features | None:
        """The verified full entry, or None if it is not cached (or was damaged, and so dropped)."""
        found = self._read(content_hash, None)
        return found[0] if found is not None else None

    def get_for_copy(self, content_hash: str, name: str) -> tuple[Features, CheckedCopy | None] | None:
        """The entry with tensor `name` left out of its tensors and handed over as a `CheckedCopy` instead (checked
        as it is copied out), everything else verified; the copy is None where the entry was verified whole (no chunk
        digests: its content hash; an fp8 entry, whose hidden states are dequantised with their scales). None if it
        is not cached (or was damaged, and so dropped)."""
        return self._read(content_hash, name)

    def _read(self, content_hash: str, deferred: str | None) -> tuple[Features, CheckedCopy | None] | None:
        path = self._path(content_hash)
        try:
            with path.open("rb") as handle:
                # copy-on-write: tensors over it can be written to without touching the file
                body = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        except (FileNotFoundError, ValueError):
            return None
        copies: list[CheckedCopy] = []

        def by_chunks(features: Features) -> bool:
            if deferred is None or deferred not in features.tensors or HIDDEN_SCALES in features.tensors:
                return verify_decoded(features)
            if not verify_decoded(features, defer=frozenset({deferred})):
                return False
            chunks = features.manifest.tensors[deferred].chunks
            assert chunks is not None  # verify_decoded checked every tensor has its digests
            copies.append(CheckedCopy(features.tensors[deferred], chunks, lambda: path.unlink(missing_ok=True)))
            return True

        try:
            features = decode_verified(body, by_chunks)
        except IntegrityError:
            path.unlink(missing_ok=True)
            return None
        if features.content_hash != content_hash or not features.full:
            path.unlink(missing_ok=True)
            return None
        with contextlib.suppress(FileNotFoundError):  # evicted meanwhile: the mmap still holds it
            os.utime(path)  # most recently used
        if not copies:
            return features, None
        rest = {name: tensor for name, tensor in features.tensors.items() if name != deferred}
        return dataclasses.replace(features, tensors=rest), copies[0]

    def put(self, features: Features) -> None:
        """Keep a verified full entry; slices are not cached (their hash covers only themselves)."""
        if not features.full:
            return
        path = self._path(features.content_hash)
        if path.exists():
            return
        manifest = features.manifest
        metadata = safetensors_body.served_metadata(
            manifest.model_dump_json(), features.layers, features.tokens, manifest.content_hash, True
        )
        # a cache: a lost file costs a refetch, and every read is verified, so no fsync
        body = safetensors_body.encode_parts(features.tensors.values(), metadata)
        atomic_write(path, body, staging_dir=self.directory / "tmp", durable=False)
        self._evict()

    def _dataset_path(self, dataset_id: str) -> Path:
        return self.directory / "datasets" / f"{dataset_id.removeprefix('sha256:')}.hsds"

    def get_dataset(self, dataset_id: str) -> DatasetIndex | None:
        """A dataset index kept here, checked against its id (None if absent or damaged, and so dropped)."""
        path = self._dataset_path(dataset_id)
        try:
            return datasets.decode(path.read_bytes(), dataset_id)
        except FileNotFoundError:
            return None
        except datasets.DatasetError:
            path.unlink(missing_ok=True)
            return None

    def put_dataset(self, dataset_id: str, body: bytes) -> None:
        """Keep a verified dataset index (small: never evicted)."""
        path = self._dataset_path(dataset_id)
        if not path.exists():
            atomic_write(path, body, staging_dir=self.directory / "tmp", durable=False)

    def size(self) -> int:
        return sum(p.stat().st_size for p in self._files())

    def _files(self) -> list[Path]:
        return [p for p in self.directory.glob("??/*.safetensors") if p.is_file()]

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
