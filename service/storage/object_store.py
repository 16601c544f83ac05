"""Blobs as Zarr v3 groups in an object store (any S3 API: AWS S3, MinIO, Ceph RGW, R2 …) through obstore, Rust's
`object_store`: ranged and concurrent gets with the GIL released, conditional puts.

The layout is the local store's, as object keys under the store's prefix: `blobs/ab/<hex>/<array>/zarr.json` and
`.../<array>/c/0/0/0` (one shard per array), then `blobs/ab/<hex>/zarr.json`, the group's metadata, put last and only
if absent (`If-None-Match: *`): a blob exists once that object does, so a crash before it leaves nothing visible
(what it left is overwritten by the next write of the same content), and two writers of the same content agree on one
winner. Manifest documents are `manifests/ab/<name>.json`, also put only if absent. zarr-python opens a blob straight
from the bucket (`zarr.storage.ObjectStore`; tested).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError

from schemas.chunks import ChunkDigests, digests_of
from schemas.codecs import DEFAULT_CODEC, StoreCodec
from schemas.keys import is_content_hash
from schemas.tensors import RawTensor
from service.errors import ConfigError, ReadOnly, StoreUnavailable
from service.settings import WRITE_CODEC_THREADS
from service.storage.layout import ShardedReads, chunk_shape, runs
from service.storage.protocol import Stored
from service.storage.shard_reader import shard_key
from service.storage.shard_writer import encode_array

if TYPE_CHECKING:
    from obstore import GetOptions

T = TypeVar("T")
_GROUP = "zarr.json"


def _calling(call: Callable[[], T]) -> T:
    """obstore's errors as the ones the rest of the service knows: KeyError for a missing object, StoreUnavailable
    for any other failure of the store (unreachable, refused, throttled, denied). Damage is never the store's to
    report: our own checks (crc32c, digests, content hash) find it in the bytes that do arrive."""
    try:
        return call()
    except (FileNotFoundError, NotFoundError) as exc:
        raise KeyError(str(exc)[:200]) from None
    except AlreadyExistsError:
        raise
    except BaseError as exc:
        raise StoreUnavailable(f"the object store failed ({type(exc).__name__}: {str(exc)[:200]}); try again") from None


class ObjectArray:
    """One array of a blob in the object store, as the shard reader reads it."""

    def __init__(self, store: Any, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self.label = prefix
        self._metadata: bytes | None = None  # one GET per read, not one per use
        self._shard: str | None = None

    def metadata(self) -> bytes:
        if self._metadata is None:
            self._metadata = bytes(_calling(lambda: obstore.get(self.store, f"{self.prefix}/zarr.json").bytes()))
        return self._metadata

    def shard(self) -> str:
        if self._shard is None:
            self._shard = f"{self.prefix}/{shard_key(len(json.loads(self.metadata())['shape']))}"
        return self._shard

    def tail(self, length: int) -> tuple[memoryview, int]:
        result = _calling(lambda: obstore.get(self.store, self.shard(), options={"range": {"suffix": length}}))
        return memoryview(result.bytes()), int(result.meta["size"])

    def read_many(self, spans: Sequence[tuple[int, int]]) -> list[memoryview]:
        if not spans:
            return []
        starts, lengths = [s for s, _ in spans], [n for _, n in spans]
        fetched = _calling(lambda: obstore.get_ranges(self.store, self.shard(), starts=starts, lengths=lengths))
        return [memoryview(b) for b in fetched]


_RETRIES = {
    "max_retries": 3,
    "retry_timeout": timedelta(seconds=10),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2},
}


def _s3(url: str, s3_endpoint: str | None) -> Any:
    """`s3://bucket/prefix`: credentials and region from the AWS_* variables, as every S3 tool reads them."""
    from obstore.store import S3Store

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    # A dead store is said within seconds (503 store_unavailable), not after obstore's default 10 retries over
    # up to 3 minutes: the client and its loaders retry with their own backoff.
    options: dict[str, Any] = {"client_options": {"connect_timeout": "2s"}, "retry_config": _RETRIES}
    if s3_endpoint is not None:
        options["endpoint"] = s3_endpoint
        if s3_endpoint.startswith("http://"):
            options["client_options"]["allow_http"] = True
    if not os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
        options["region"] = "us-east-1"
    return S3Store(bucket, prefix=prefix or None, **options)


def _file(url: str, _s3_endpoint: str | None) -> Any:
    """`file:///path`: a filesystem every host mounts."""
    from obstore.store import LocalStore

    root = url.removeprefix("file://")
    os.makedirs(root, exist_ok=True)
    return LocalStore(root)


# URL scheme -> the obstore store it opens
OBJECT_STORES: dict[str, Callable[[str, str | None], Any]] = {"s3": _s3, "file": _file}


def open_url(url: str, s3_endpoint: str | None = None) -> Any:
    """The obstore store an URL names (a scheme of OBJECT_STORES)."""
    scheme = url.partition("://")[0]
    if scheme not in OBJECT_STORES or "://" not in url:
        raise ConfigError(f"store_url {url!r}: expected s3://bucket/prefix or file:///path")
    return OBJECT_STORES[scheme](url, s3_endpoint)


class ObjectZarrStore(ShardedReads):
    """`store`: an obstore store (S3Store for any S3 API; LocalStore and MemoryStore work alike)."""

    def __init__(
        self,
        store: Any,
        chunk_tokens: int = 256,
        read_only: bool = False,
        codec: StoreCodec = DEFAULT_CODEC,
        url: str = "object store",
        codec_threads: int = WRITE_CODEC_THREADS,
    ) -> None:
        self.store = store
        self.chunk_tokens = chunk_tokens
        self.read_only = read_only
        self.codec = codec
        self.codec_threads = codec_threads  # the threads compressing a new blob's chunks
        self.url = url  # what it is, for messages and the startup lines

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnly("this replica serves the store read-only: it writes nothing")

    @staticmethod
    def _prefix(content_hash: str) -> str:
        if not is_content_hash(content_hash):
            raise KeyError(f"not a content hash: {content_hash!r}")
        hexdigest = content_hash.removeprefix("sha256:")
        return f"blobs/{hexdigest[:2]}/{hexdigest}"

    # -- writing -------------------------------------------------------------------------------------------------
    def put_if_absent(self, content_hash: str, tensors: Sequence[RawTensor]) -> Stored:
        self._writable()
        prefix = self._prefix(content_hash)
        if self.exists(content_hash):
            return Stored(False, self._digests(tensors))
        digests = {}
        for tensor in sorted(tensors, key=lambda t: t.name):
            chunk = chunk_shape(tensor.shape, self.chunk_tokens)
            encoded = encode_array(
                tensor.numpy(), chunk, {"dtype": tensor.dtype}, self.codec, threads=self.codec_threads
            )
            shard = b"".join(encoded.shard)
            array = f"{prefix}/{tensor.name}"
            _calling(functools.partial(obstore.put, self.store, f"{array}/{encoded.shard_key}", shard))
            _calling(functools.partial(obstore.put, self.store, f"{array}/zarr.json", encoded.metadata))
            digests[tensor.name] = encoded.digests
        info = {t.name: {"dtype": t.dtype, "shape": list(t.shape)} for t in tensors}
        group: dict[str, Any] = {"attributes": {"hsstore": {"content_hash": content_hash, "tensors": info}}}
        group |= {"zarr_format": 3, "node_type": "group"}
        try:  # the commit point: the blob exists from here on
            _calling(lambda: obstore.put(self.store, f"{prefix}/{_GROUP}", json.dumps(group).encode(), mode="create"))
        except AlreadyExistsError:
            return Stored(False, digests)  # another writer published the same content first
        return Stored(True, digests)

    def _digests(self, tensors: Sequence[RawTensor]) -> dict[str, ChunkDigests]:
        return {t.name: digests_of(t.numpy(), chunk_shape(t.shape, self.chunk_tokens)) for t in tensors}

    # -- reading -------------------------------------------------------------------------------------------------
    def _tensors(self, content_hash: str) -> dict[str, dict]:
        document = _calling(lambda: obstore.get(self.store, f"{self._prefix(content_hash)}/{_GROUP}").bytes())
        return json.loads(bytes(document))["attributes"]["hsstore"]["tensors"]

    def _source(self, content_hash: str, name: str) -> ObjectArray:
        return ObjectArray(self.store, f"{self._prefix(content_hash)}/{name}")

    def read_located(
        self, content_hash: str, name: str, chunks: Sequence[tuple[int, int, int]]
    ) -> Iterator[bytes | memoryview]:
        """Fetched now, concurrently (adjacent chunks as one ranged GET each run): the service relays these bytes;
        direct reads let clients fetch them from the bucket themselves instead."""
        spans = [(start, stop - start) for start, stop in runs(chunks)]
        return iter(ObjectArray(self.store, f"{self._prefix(content_hash)}/{name}").read_many(spans))

    def stored_bytes(self, content_hash: str) -> int:
        if not self.exists(content_hash):
            raise KeyError(content_hash)
        listing = obstore.list(self.store, prefix=f"{self._prefix(content_hash)}/")
        return sum(int(meta["size"]) for batch in listing for meta in batch)

    def direct_url(self, content_hash: str, name: str, ndim: int, expires_s: float) -> str | None:
        """A presigned GET of the shard (S3 and compatible stores); None for a store that cannot sign (a shared
        filesystem)."""
        path = f"{self._prefix(content_hash)}/{name}/{shard_key(ndim)}"
        try:
            return str(obstore.sign(self.store, "GET", path, timedelta(seconds=expires_s)))
        except (ValueError, TypeError, BaseError):  # obstore refuses to sign for stores that cannot
            return None

    def exists(self, content_hash: str) -> bool:
        try:
            _calling(lambda: obstore.head(self.store, f"{self._prefix(content_hash)}/{_GROUP}"))
        except KeyError:
            return False
        return True

    def delete(self, content_hash: str) -> bool:
        self._writable()
        prefix = self._prefix(content_hash)
        if not self.exists(content_hash):
            return False
        # the commit object first: from then on the blob is gone for every reader, whatever else is left
        _calling(lambda: obstore.delete(self.store, f"{prefix}/{_GROUP}"))
        paths = [m["path"] for batch in obstore.list(self.store, prefix=f"{prefix}/") for m in batch]
        if paths:
            _calling(lambda: obstore.delete(self.store, paths))
        return True

    def iter(self) -> Iterator[str]:
        for batch in obstore.list(self.store, prefix="blobs/"):
            for meta in batch:
                parts = meta["path"].split("/")
                if len(parts) == 4 and parts[3] == _GROUP:
                    yield f"sha256:{parts[2]}"

    # -- manifests -----------------------------------------------------------------------------------------------
    def put_manifest(self, name: str, document: bytes) -> None:
        self._writable()
        with contextlib.suppress(AlreadyExistsError):  # idempotent: one name, one document
            _calling(lambda: obstore.put(self.store, f"manifests/{name[:2]}/{name}.json", document, mode="create"))

    def put_dataset(self, name: str, pieces: Iterable[bytes | memoryview]) -> None:
        self._writable()
        if self.dataset_size(name) is not None:  # one name, one index (its id: the same bytes)
            return
        # a multipart upload (an object appears whole or not at all); it cannot be conditional, but a second writer
        # of one name writes the same bytes
        _calling(lambda: obstore.put(self.store, f"datasets/{name}.hsds", iter(pieces)))

    def dataset_size(self, name: str) -> int | None:
        try:
            return int(_calling(lambda: obstore.head(self.store, f"datasets/{name}.hsds"))["size"])
        except KeyError:
            return None

    def read_dataset(self, name: str, start: int = 0, length: int | None = None) -> bytes | None:
        options: GetOptions = {"range": (start, start + length) if length is not None else {"offset": start}}
        try:
            got = _calling(lambda: obstore.get(self.store, f"datasets/{name}.hsds", options=options))
            return bytes(got.bytes())
        except KeyError:
            return None

    def iter_manifests(self) -> Iterator[tuple[str, bytes]]:
        for batch in obstore.list(self.store, prefix="manifests/"):
            for meta in sorted(batch, key=lambda m: m["path"]):
                name = meta["path"].rsplit("/", 1)[-1].removesuffix(".json")
                yield name, bytes(_calling(functools.partial(_get_bytes, self.store, meta["path"])))

    def ping(self) -> None:
        _calling(lambda: obstore.list_with_delimiter(self.store, prefix="blobs/"))


def _get_bytes(store: Any, path: str) -> Any:
    return obstore.get(store, path).bytes()
