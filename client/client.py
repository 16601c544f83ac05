"""`FeatureClient`: the thin httpx client training jobs, eval scripts and operators use. It never loads a model.

Request bodies are the contract's models (`schemas.api`), keys the contract's `FeatureKey`; every features body is
verified before it is returned (see `client/features.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Unpack

import httpx

from client.bodies import Buffered, Connections, Exactly, at_end, content_length, read_all, read_exactly
from client.cache import FeatureCache
from client.chunk_checks import DeferredCopy
from client.direct import read_direct
from client.errors import IntegrityError
from client.features import Features
from client.keys import KeyLike, batch_item, part_of_parts, snapshot_key
from client.receive import receive
from client.service_calls import ServiceCalls
from client.transport import Transport, batch_error
from schemas import batch_frames, datasets
from schemas.api import BatchRequest, DatasetInfo, DatasetRequest, FeatureRead
from schemas.chunk_body import DirectEntries
from schemas.featureset import FeatureSet, LayerId
from schemas.http import BY_FRAME_KIND, DEFAULT_URL, ERROR_FRAME, BodyFormat, accept_header, format_of
from schemas.keys import FeatureKey, KeyParts
from schemas.states import Verify
from schemas.tokens import TokenRange

Tokens = tuple[int | None, int | None] | TokenRange | str


class FeatureClient(ServiceCalls):
    """Feature reads (here) and the service's other calls (`ServiceCalls`). `http` is the transport seam: pass any
    `httpx.Client` (an in-process ASGI client in tests), else one is made."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 600.0,
        http: httpx.Client | None = None,
        cache: FeatureCache | str | Path | None = None,
        max_connections: int = 16,
        wire_format: BodyFormat | str = BodyFormat.CHUNKS,
        verify: Verify = "chunks",
        direct_reads: bool = False,
    ) -> None:
        """`wire_format="chunks"` receives the stored chunks and decodes them here, checking each against the
        digest recorded when it was written (the service then spends next to nothing per byte); "safetensors" has
        the service decode. `verify="full"` also checks a whole entry's content hash (entries written before chunk
        digests, and every safetensors body, are checked by hash either way). `direct_reads=True` reads the chunks
        straight from the object store the service's blobs are in (presigned URLs it hands out), for big training
        clusters: the service then only resolves keys."""
        self._owns_http = http is None
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout, limits=limits)
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"
        # bodies come over sockets of our own, read into our buffers, unless the caller handed in its httpx client
        self._transport = Transport(self._http, self._sockets(timeout) if self._owns_http else None)
        self.cache = FeatureCache(cache) if isinstance(cache, str | Path) else cache
        self._pool: ThreadPoolExecutor | None = None
        self._max_connections = max_connections
        self.wire_format = BodyFormat(wire_format)
        self.verify = verify
        self._accept = {"accept": accept_header(self.wire_format)}
        self.direct_reads = direct_reads
        self._objects = Connections(timeout)  # no bearer token: presigned URLs carry their own

    @property
    def url(self) -> str:
        return self._transport.url

    def _sockets(self, timeout: float) -> Connections:
        return Connections(timeout, {k: v for k, v in self._http.headers.items() if k.lower() == "authorization"})

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._objects.close()
        if self._transport.sockets is not None:
            self._transport.sockets.close()
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> FeatureClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- reading features ----------------------------------------------------------------------------------------
    def get(
        self,
        prompt: Mapping[str, Any] | None = None,
        *,
        layers: Sequence[LayerId] | None = None,
        tokens: Tokens | None = None,
        **key: Unpack[KeyParts],
    ) -> Features:
        """Fetch one entry's features, verified. Name the prompt (hashed here) or its prompt_hash; a token range past
        the end is clipped, as Python slicing clips (`Features.tokens` says what was served). A featureset object
        is named by its parts: any stored featureset holding it serves the read, sliced to its layers
        (`Features.manifest` says which entry served it); an id names that featureset's entry only."""
        return self._read(part_of_parts(prompt, layers=layers, tokens=tokens, **key))

    def fetch(self, key: FeatureKey, layers: Sequence[LayerId] | None = None, tokens: Tokens | None = None) -> Features:
        """`get` by key. A whole entry pinned by content hash is served from the cache when it is there, without
        any request."""
        span = str(TokenRange.of(tokens)) if tokens is not None else None
        return self._read(
            FeatureRead(**key.model_dump(), layers=list(layers) if layers is not None else None, tokens=span)
        )

    def _read(self, part: FeatureRead) -> Features:
        """One key with its part: from the cache, the bucket (direct reads) or the service."""
        cached = self._cached(part)
        if cached is not None:
            return cached
        if self.direct_reads:
            return self._direct_uncached([part])[0]
        features, _ = self._served(part.key, part.read_params())
        return self._kept(features)

    def fetch_for_copy(self, key: FeatureKey, name: str) -> tuple[Features, DeferredCopy | None]:
        """A whole entry with its tensor `name` handed over as a `DeferredCopy` (checked chunk by chunk as it is
        copied out, which `pad_collate` does) and left out of the features' tensors; the copy is None where the
        entry came decoded whole (an fp8 entry, a safetensors body, direct reads, `verify="full"`, and every read
        of a client with a cache that has not got it yet: the cache keeps whole entries)."""
        if self.cache is not None and key.content_hash is not None:
            found = self.cache.get_for_copy(key.content_hash, name)
            if found is not None:
                return found
        if self.cache is not None or self.direct_reads:
            return self.fetch(key), None
        return self._served(key, key.params(), defer=name)

    def _served(
        self, key: FeatureKey, params: dict[str, Any], defer: str | None = None
    ) -> tuple[Features, DeferredCopy | None]:
        """One features body from the service, verified (`defer`: as `receive_chunks` takes it)."""
        path = f"/v1/features/{key.prompt_hash}"
        with self._transport.stream("GET", path, params=params, headers=self._accept) as body:
            form = format_of(body.headers.get("content-type"))
            length = content_length(body)
            if length is None:  # no Content-Length (a proxy's chunked encoding): the body whole, then as any other
                whole = read_all(body)
                return receive(form, Buffered(whole, body), len(whole), self.verify, defer)
            received = receive(form, body, length, self.verify, defer)
            if not at_end(body):
                raise IntegrityError(f"the body runs past its {length} bytes")
            return received

    def get_many(self, keys: Sequence[KeyLike]) -> list[Features]:
        """Every key fetched in parallel over the connection pool; results in order."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_connections, thread_name_prefix="hsstore-client")
        items = [batch_item(key) for key in keys]
        if self.direct_reads:
            return self._direct(items)
        return list(self._pool.map(self._read, items))

    def _direct(self, items: list[FeatureRead]) -> list[Features]:
        """Locate every key not in the cache in one request, then read each entry's chunks from the object store
        in parallel."""
        cached = [self._cached(item) for item in items]
        missing = [item for item, hit in zip(items, cached, strict=True) if hit is None]
        fetched = iter(self._direct_uncached(missing) if missing else [])
        return [hit if hit is not None else next(fetched) for hit in cached]

    def _cached(self, item: FeatureRead) -> Features | None:
        """A whole entry pinned by content hash, from the cache (None if it is not there)."""
        if self.cache is None or item.content_hash is None or item.layers is not None or item.tokens is not None:
            return None
        return self.cache.get(item.content_hash)

    def _direct_uncached(self, items: list[FeatureRead]) -> list[Features]:
        request = BatchRequest(keys=items)
        body = request.model_dump(mode="json", exclude_none=True)
        located = self._transport.call(DirectEntries, "POST", "/v1/features:locate", json=body)
        if len(located.entries) != len(items):
            raise IntegrityError(f"asked to locate {len(items)} entries, got {len(located.entries)}")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_connections, thread_name_prefix="hsstore-client")
        fetches = ThreadPoolExecutor(self._max_connections * 4, thread_name_prefix="hsstore-ranges")
        try:
            with self._transport.failures("GET", "(object store)"):
                read = list(
                    self._pool.map(lambda e: read_direct(e, self._objects, fetches, self.verify), located.entries)
                )
        finally:
            fetches.shutdown(wait=False)
        return [self._kept(features) for features in read]

    def get_batch(self, keys: Sequence[KeyLike]) -> list[Features]:
        """Several entries in one request through `POST /v1/features:batch`; each body verified."""
        if self.direct_reads:
            return self._direct([batch_item(key) for key in keys])
        request = BatchRequest(keys=[batch_item(key) for key in keys])
        body = request.model_dump(mode="json", exclude_none=True)
        received = []
        with self._transport.stream("POST", "/v1/features:batch", json=body, headers=self._accept) as response:
            for index, item in enumerate(request.keys):  # each frame decoded as it arrives
                try:
                    length, kind = batch_frames.FRAME_PREFIX.unpack(
                        read_exactly(response, batch_frames.FRAME_PREFIX.size)
                    )
                    frame = Exactly(response, length)
                    if kind == ERROR_FRAME and length > batch_frames.MAX_ERROR_FRAME:
                        raise IntegrityError(f"an error frame of {length} bytes (an envelope is a few hundred)")
                    if kind == ERROR_FRAME:
                        raise batch_error(index, item, memoryview(read_exactly(frame, length)))
                    if kind not in BY_FRAME_KIND:
                        raise IntegrityError(f"unknown frame kind {kind}")
                    form = BY_FRAME_KIND[kind].format
                    features = self._kept(receive(form, frame, length, self.verify)[0])
                except IntegrityError as exc:
                    raise IntegrityError(f"keys[{index}] (prompt_hash {item.prompt_hash[:12]}…): {exc}") from None
                received.append(features)
            if not at_end(response):
                raise IntegrityError(f"asked for {len(request.keys)} entries, received more frames")
        return received

    def _kept(self, features: Features) -> Features:
        if self.cache is not None:
            self.cache.put(features)
        return features

    # -- dataset snapshots ---------------------------------------------------------------------------------------
    def create_dataset(
        self,
        name: str,
        keys: Sequence[KeyLike] | None = None,
        *,
        model_revision: str | None = None,
        backend: str | None = None,
        featureset: FeatureSet | str | None = None,
        since: str | None = None,
    ) -> DatasetInfo:
        """Snapshot `keys` (each resolved to its newest version), or every version a listing with these filters
        shows, as dataset `name`; its `dataset_id` names exactly those versions from then on."""
        request = DatasetRequest(
            name=name,
            keys=[snapshot_key(k) for k in keys] if keys is not None else None,
            model_revision=model_revision,
            backend=backend,
            featureset_id=featureset.id if isinstance(featureset, FeatureSet) else featureset,
            since=since,
        )
        body = request.model_dump(mode="json", exclude_none=True)
        return self._transport.call(DatasetInfo, "POST", "/v1/datasets", json=body)

    def dataset_info(self, ref: str) -> DatasetInfo:
        return self._transport.call(DatasetInfo, "GET", f"/v1/datasets/{ref}")

    def dataset(self, ref: str) -> datasets.DatasetIndex:
        """A dataset's index by id or name, checked against its id (against `ref` itself when it is an id); an id
        already in the cache directory is read from there without a request."""
        pinned = ref if datasets.is_dataset_id(ref) else None
        if pinned is not None and self.cache is not None and (kept := self.cache.get_dataset(pinned)) is not None:
            return kept
        response = self._transport.request("GET", f"/v1/datasets/{ref}/index")
        try:
            index = datasets.decode(response.content, pinned or response.headers.get(datasets.ID_HEADER))
        except datasets.DatasetError as exc:  # the service streams the index as stored: checked here, on receipt
            raise IntegrityError(f"dataset {ref}: {exc} (damaged in the store or on the way)") from None
        if self.cache is not None:
            self.cache.put_dataset(index.dataset_id, response.content)
        return index
