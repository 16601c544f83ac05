"""Dataset snapshots: a list of whole versions written once into the store as a compact index (`schemas.datasets`),
named in the catalog's key/value table so every replica resolves a name alike. A name, once given, keeps its
snapshot: asking again for the same entries gives the same id back, other entries under that name are refused.

An index of 10^7 entries is 700 MB: a snapshot of a listing streams the catalog's keys into a spool file a page at a
time, hashes it and writes it into the store as it is read; its size and tokens are kept beside its name, so
`info` reads no index and serving one streams it."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from schemas import datasets
from schemas.api import DatasetInfo, DatasetRequest
from schemas.featureset import LayerId
from schemas.keys import EntryFilter, FeatureKey
from schemas.manifest import Manifest
from schemas.timestamps import utc_now
from service.catalog.protocol import KeyValue, VersionCatalog
from service.errors import CorruptEntry, DatasetNotFound, EntryNotFound, InvalidRequest, NameTaken
from service.storage.protocol import Documents

_NAME = "dataset:"  # the key/value table's names of datasets
_INFO = "dataset-info:"  # and each index's size, entries and tokens (an index written before: read once, then kept)
_PAGE = 10_000
_PIECE = 1 << 20  # an index is read and sent a MB at a time


class Datasets:
    def __init__(
        self,
        resolve: Callable[[FeatureKey, list[LayerId] | None], Manifest],
        versions: VersionCatalog,
        store: Documents,
        kv: KeyValue,
        spool_dir: Path | None = None,
    ) -> None:
        self.resolve, self.versions, self.store, self.kv = resolve, versions, store, kv
        self.spool_dir = spool_dir  # where an index is spooled before it is named (None: the system's temp)

    def create(self, request: DatasetRequest) -> DatasetInfo:
        if self.spool_dir is not None:
            self.spool_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=self.spool_dir) as records:
            spooled = datasets.spool(self._chosen(request), records)
            if not spooled.count:
                raise EntryNotFound("no entries match: a dataset holds at least one")
            named = self.kv.kv_get(_NAME + request.name)
            if named is not None:  # the same entries again keep the name's snapshot, with its creation time
                stored = self._header(named)
                again = datasets.prefix(request.name, stored.created_at, spooled)
                if _digest(again, records) == named:
                    return self.info(named)
                raise NameTaken(f"dataset {request.name!r} already names {named}: give the new one another name")
            head = datasets.prefix(request.name, utc_now(), spooled)
            dataset_id = _digest(head, records)
            self.store.put_dataset(dataset_id.removeprefix("sha256:"), _pieces(head, records))  # the index first,
            size = len(head) + records.seek(0, io.SEEK_END)
            self._keep_info(dataset_id, size, spooled.count, spooled.tokens)
            self.kv.kv_set(_NAME + request.name, dataset_id)  # then its name
        return self.info(dataset_id)

    def _chosen(self, request: DatasetRequest) -> Iterator[datasets.IndexRow]:
        if request.keys is not None:
            if any(
                v is not None for v in (request.model_revision, request.backend, request.featureset_id, request.since)
            ):
                raise InvalidRequest("give keys or listing filters, not both")
            for item in request.keys:
                manifest = self.resolve(item.key, item.layers)
                yield datasets.row_of(manifest.feature_key(), manifest.num_tokens)
            return
        where = EntryFilter(
            model_revision=request.model_revision,
            backend=request.backend,
            featureset_id=request.featureset_id,
            since=request.since,
        )
        after = 0
        while page := self.versions.find_keys(where, limit=_PAGE, after_seq=after):
            yield from (stored.row for stored in page)
            after = page[-1].seq

    def dataset_id(self, ref: str) -> str:
        """The id a dataset id or name refers to, if the store holds its index."""
        dataset_id = ref if datasets.is_dataset_id(ref) else self.kv.kv_get(_NAME + ref)
        if dataset_id is None or self.store.dataset_size(dataset_id.removeprefix("sha256:")) is None:
            raise DatasetNotFound(f"no dataset {ref!r}: `hsstore dataset create NAME` makes one")
        return dataset_id

    def pieces(self, ref: str) -> tuple[str, int, Iterator[bytes]]:
        """A dataset's id, size and bytes, a MB at a time (the client checks them against the id)."""
        dataset_id = self.dataset_id(ref)
        name = dataset_id.removeprefix("sha256:")
        size = self.store.dataset_size(name) or 0

        def read() -> Iterator[bytes]:
            for start in range(0, size, _PIECE):
                piece = self.store.read_dataset(name, start, min(_PIECE, size - start))
                if piece is None:
                    raise CorruptEntry(f"dataset {dataset_id} went missing from the store while it was read")
                yield piece

        return dataset_id, size, read()

    def info(self, ref: str) -> DatasetInfo:
        dataset_id = self.dataset_id(ref)
        header = self._header(dataset_id)
        kept = self.kv.kv_get(_INFO + dataset_id)
        if kept is None:  # an index written before its size was kept beside its name: counted once, then kept
            size, tokens = self._count(dataset_id)
            self._keep_info(dataset_id, size, header.count, tokens)
        else:
            size, tokens = (int(json.loads(kept)[part]) for part in ("bytes", "tokens"))
        return DatasetInfo(
            dataset_id=dataset_id,
            name=header.name,
            entries=header.count,
            tokens=tokens,
            bytes=size,
            created_at=header.created_at,
        )

    def _header(self, dataset_id: str) -> datasets.DatasetHeader:
        name = dataset_id.removeprefix("sha256:")
        try:
            start = self.store.read_dataset(name, 0, datasets.PREFIX_SIZE) or b""
            return datasets.read_header(self.store.read_dataset(name, 0, datasets.header_size(start)) or b"")
        except datasets.DatasetError as exc:
            raise CorruptEntry(f"dataset {dataset_id} is damaged in the store ({exc}): create it again") from None

    def _count(self, dataset_id: str) -> tuple[int, int]:
        """An index's size and tokens, read through once and checked against its id."""
        digest, size, tokens = hashlib.sha256(), 0, 0
        _, _, pieces = self.pieces(dataset_id)
        body = b""
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
            body += piece
        if "sha256:" + digest.hexdigest() != dataset_id:
            raise CorruptEntry(f"dataset {dataset_id} is damaged in the store: create it again")
        tokens = datasets.decode(body, dataset_id).tokens
        return size, tokens

    def _keep_info(self, dataset_id: str, size: int, entries: int, tokens: int) -> None:
        self.kv.kv_set(_INFO + dataset_id, json.dumps({"bytes": size, "entries": entries, "tokens": tokens}))


def _digest(head: bytes, records: BinaryIO) -> str:
    digest = hashlib.sha256(head)
    for piece in _records(records):
        digest.update(piece)
    return "sha256:" + digest.hexdigest()


def _records(records: BinaryIO) -> Iterator[bytes]:
    records.seek(0)
    while piece := records.read(_PIECE):
        yield piece


def _pieces(head: bytes, records: BinaryIO) -> Iterator[bytes]:
    yield head
    yield from _records(records)
