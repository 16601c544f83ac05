"""Blobs as Zarr v3 groups in a local directory: `blobs/ab/<hex>/`, one shard per array, blosc + crc32c chunks.

A blob is written under `tmp/` and renamed into place once every byte (and its directory) is on disk, so a crash
mid-write leaves nothing visible; leftovers in `tmp/` are swept when the store opens.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import zarr

from schemas.chunks import ChunkDigests, digests_of
from schemas.codecs import DEFAULT_CODEC, StoreCodec
from schemas.files import atomic_write, fsync_dir, staging_owner, staging_path
from schemas.keys import is_content_hash
from schemas.tensors import RawTensor
from service.errors import ReadOnly
from service.settings import WRITE_CODEC_THREADS
from service.storage.layout import ShardedReads, chunk_shape, runs
from service.storage.protocol import Stored
from service.storage.shard_reader import LocalArray
from service.storage.shard_writer import write_array, write_group


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


_PIECE = 4 << 20


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalZarrStore(ShardedReads):
    def __init__(
        self,
        root: Path,
        chunk_tokens: int = 256,
        read_only: bool = False,
        codec: StoreCodec = DEFAULT_CODEC,
        codec_threads: int = WRITE_CODEC_THREADS,
    ) -> None:
        self.root = Path(root)
        self.chunk_tokens = chunk_tokens
        self.codec = codec  # what new blobs are written with; every codec of `StoreCodec` reads
        self.codec_threads = codec_threads  # the threads compressing a new blob's chunks
        self.read_only = read_only  # a replica on a read-only volume: reads only, touches nothing
        self._blobs = self.root / "blobs"
        self._manifests = self.root / "manifests"
        self._datasets = self.root / "datasets"
        self._tmp = self.root / "tmp"
        if read_only:
            return
        for folder in (self._blobs, self._manifests, self._tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self._sweep_tmp()

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnly(
                "this replica serves a read-only store: it writes nothing (write through the host that owns it)"
            )

    def _sweep_tmp(self) -> None:
        """Staging names carry the writer's pid: what a dead writer left was never published and goes."""
        for leftover in self._tmp.iterdir():
            pid = staging_owner(leftover)
            if pid is not None and _alive(pid):
                continue
            shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)

    def _staging(self, name: str, suffix: str = "") -> Path:
        return staging_path(self._tmp, name, suffix)

    def _path(self, content_hash: str) -> Path:
        if not is_content_hash(content_hash):
            raise KeyError(f"not a content hash: {content_hash!r}")
        hexdigest = content_hash.removeprefix("sha256:")
        return self._blobs / hexdigest[:2] / hexdigest

    # -- writing -------------------------------------------------------------------------------------------------
    def put_if_absent(self, content_hash: str, tensors: Sequence[RawTensor]) -> Stored:
        self._writable()
        final = self._path(content_hash)
        if final.exists():
            return Stored(False, self._digests(tensors))
        staging = self._staging(final.name)
        try:
            digests = self._write_group(staging, content_hash, tensors)
            _fsync_tree(staging)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, final)
            except OSError:
                if final.exists():  # another writer published the same content first
                    return Stored(False, digests)
                raise
            fsync_dir(final.parent)
            return Stored(True, digests)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def _write_group(self, path: Path, content_hash: str, tensors: Sequence[RawTensor]) -> dict[str, ChunkDigests]:
        info = {t.name: {"dtype": t.dtype, "shape": list(t.shape)} for t in tensors}
        write_group(path, {"hsstore": {"content_hash": content_hash, "tensors": info}})
        # zarr has no bfloat16: bf16 is kept as uint16 bit patterns, the real dtype recorded in the attributes
        return {
            t.name: write_array(
                path / t.name,
                t.numpy(),
                self._chunk_shape(t.shape),
                {"dtype": t.dtype},
                self.codec,
                threads=self.codec_threads,
            )
            for t in sorted(tensors, key=lambda t: t.name)
        }

    def _digests(self, tensors: Sequence[RawTensor]) -> dict[str, ChunkDigests]:
        """The digests the layout would have: what writing the same content records."""
        return {t.name: digests_of(t.numpy(), self._chunk_shape(t.shape)) for t in tensors}

    def _chunk_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return chunk_shape(shape, self.chunk_tokens)

    # -- reading -------------------------------------------------------------------------------------------------
    def _open(self, content_hash: str) -> zarr.Group:
        path = self._path(content_hash)
        if not path.is_dir():
            raise KeyError(content_hash)
        return zarr.open_group(store=zarr.storage.LocalStore(path, read_only=True), mode="r", zarr_format=3)

    def _zarr_array(self, content_hash: str, name: str) -> zarr.Array:
        found = self._open(content_hash)[name]
        if not isinstance(found, zarr.Array):
            raise KeyError(f"{content_hash}/{name} is not an array")
        return found

    def _source(self, content_hash: str, name: str) -> LocalArray:
        return LocalArray(self._path(content_hash) / name)

    def _tensors(self, content_hash: str) -> dict[str, dict]:
        document = json.loads((self._path(content_hash) / "zarr.json").read_text())
        return document["attributes"]["hsstore"]["tensors"]

    def _other_layout(self, content_hash: str) -> Callable[[str, tuple], np.ndarray]:
        """An array not in the layout we write (an older one): zarr reads it."""
        return lambda name, index: np.asarray(self._zarr_array(content_hash, name).get_orthogonal_selection(index))

    def read_located(
        self, content_hash: str, name: str, chunks: Sequence[tuple[int, int, int]]
    ) -> Iterator[bytes | memoryview]:
        """Pieces of an mmap of the shard (no copy here; the socket reads the page cache): adjacent chunks, as a
        full read's all are, go out as one run, in pieces of at most `_PIECE`. The file is opened now."""
        root = self._path(content_hash) / name
        if not root.is_dir():
            raise KeyError(content_hash)
        with LocalArray(root).shard().open("rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        mapped.madvise(mmap.MADV_SEQUENTIAL)
        view = memoryview(mapped)  # the mmap lives as long as a piece of it is referenced
        if any(offset + length > view.nbytes for _, offset, length in chunks):
            raise ValueError(f"{name}: the shard is shorter than its index says")
        return (view[at : min(stop, at + _PIECE)] for start, stop in runs(chunks) for at in range(start, stop, _PIECE))

    def stored_bytes(self, content_hash: str) -> int:
        root = self._path(content_hash)
        if not root.is_dir():
            raise KeyError(content_hash)
        return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())

    def direct_url(self, content_hash: str, name: str, ndim: int, expires_s: float) -> str | None:
        return None  # this host's disk: only the service reads it

    def exists(self, content_hash: str) -> bool:
        return self._path(content_hash).is_dir()

    def delete(self, content_hash: str) -> bool:
        self._writable()
        path = self._path(content_hash)
        if not path.exists():
            return False
        # rename first so a reader never sees a half-deleted blob
        doomed = self._staging(path.name, ".deleting")
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def iter(self) -> Iterator[str]:
        for prefix in sorted(self._blobs.iterdir()):
            for blob in sorted(prefix.iterdir()):
                yield f"sha256:{blob.name}"

    # -- manifests -----------------------------------------------------------------------------------------------
    def put_manifest(self, name: str, document: bytes) -> None:
        self._writable()
        final = self._manifests / name[:2] / f"{name}.json"
        if final.exists():
            return
        atomic_write(final, document, staging_dir=self._tmp)

    def put_dataset(self, name: str, pieces: Iterable[bytes | memoryview]) -> None:
        self._writable()
        final = self._datasets / f"{name}.hsds"
        if not final.exists():
            atomic_write(final, pieces, staging_dir=self._tmp)

    def dataset_size(self, name: str) -> int | None:
        try:
            return (self._datasets / f"{name}.hsds").stat().st_size
        except FileNotFoundError:
            return None

    def read_dataset(self, name: str, start: int = 0, length: int | None = None) -> bytes | None:
        try:
            with (self._datasets / f"{name}.hsds").open("rb") as handle:
                handle.seek(start)
                return handle.read(-1 if length is None else length)
        except FileNotFoundError:
            return None

    def iter_manifests(self) -> Iterator[tuple[str, bytes]]:
        for path in sorted(self._manifests.rglob("*.json")):
            yield path.stem, path.read_bytes()

    def ping(self) -> None:
        access = os.R_OK if self.read_only else os.W_OK
        if not (self._blobs.is_dir() and os.access(self._blobs, access)):
            raise OSError(f"the blob directory is not {'readable' if self.read_only else 'writable'}")
