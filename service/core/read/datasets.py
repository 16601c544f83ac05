"""Dataset snapshots: a list of whole versions written once into the store as a compact index (`schemas.datasets`),
named in the catalog's key/value table so every replica resolves a name alike. A name, once given, keeps its
snapshot: asking again for the same entries gives the same id back, other entries under that name are refused."""

from __future__ import annotations

from collections.abc import Callable

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
_PAGE = 5_000


class Datasets:
    def __init__(
        self,
        resolve: Callable[[FeatureKey, list[LayerId] | None], Manifest],
        versions: VersionCatalog,
        store: Documents,
        kv: KeyValue,
    ) -> None:
        self.resolve, self.versions, self.store, self.kv = resolve, versions, store, kv

    def create(self, request: DatasetRequest) -> DatasetInfo:
        manifests = self._chosen(request)
        if not manifests:
            raise EntryNotFound("no entries match: a dataset holds at least one")
        named = self.kv.kv_get(_NAME + request.name)
        keys = [(m.feature_key(), m.num_tokens) for m in manifests]
        created_at = utc_now()
        if named is not None:  # the same entries again keep the name's snapshot, with its creation time
            stored, stored_body = self.load(named)
            again = datasets.encode(request.name, stored.header.created_at, keys)
            if datasets.dataset_id(again) == named:
                return self._info(stored, len(stored_body))
            raise NameTaken(f"dataset {request.name!r} already names {named}: give the new one another name")
        body = datasets.encode(request.name, created_at, keys)
        dataset_id = datasets.dataset_id(body)
        self.store.put_dataset(dataset_id.removeprefix("sha256:"), body)  # the index first, then its name
        self.kv.kv_set(_NAME + request.name, dataset_id)
        return self._info(datasets.decode(body, dataset_id), len(body))

    def load(self, ref: str) -> tuple[datasets.DatasetIndex, bytes]:
        """The index of a dataset id or name, decoded and checked against its id, and its bytes as stored."""
        dataset_id = ref if datasets.is_dataset_id(ref) else self.kv.kv_get(_NAME + ref)
        body = self.store.get_dataset(dataset_id.removeprefix("sha256:")) if dataset_id else None
        if dataset_id is None or body is None:
            raise DatasetNotFound(f"no dataset {ref!r}: `hsstore dataset create NAME` makes one")
        try:
            return datasets.decode(body, dataset_id), body  # a damaged index is refused here, never served
        except datasets.DatasetError as exc:
            raise CorruptEntry(f"dataset {dataset_id} is damaged in the store ({exc}): create it again") from None

    def info(self, ref: str) -> DatasetInfo:
        index, body = self.load(ref)
        return self._info(index, len(body))

    def _chosen(self, request: DatasetRequest) -> list[Manifest]:
        if request.keys is not None:
            if any(
                v is not None for v in (request.model_revision, request.backend, request.featureset_id, request.since)
            ):
                raise InvalidRequest("give keys or listing filters, not both")
            return [self.resolve(item.key, item.layers) for item in request.keys]
        where = EntryFilter(
            model_revision=request.model_revision,
            backend=request.backend,
            featureset_id=request.featureset_id,
            since=request.since,
        )
        found, after = [], 0
        while page := self.versions.find(where, limit=_PAGE, after_seq=after):
            found += page
            after = page[-1].seq or 0
            if len(page) < _PAGE:
                break
        return found

    @staticmethod
    def _info(index: datasets.DatasetIndex, size: int) -> DatasetInfo:
        return DatasetInfo(
            dataset_id=index.dataset_id,
            name=index.header.name,
            entries=len(index),
            tokens=index.tokens,
            bytes=size,
            created_at=index.header.created_at,
        )
