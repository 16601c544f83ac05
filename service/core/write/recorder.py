"""Recording a version, for every path that adds one (extraction and import): its manifest built from the key, then
blob (with its chunk digests), manifest document and catalog row, in that order, so a crash at any point leaves
nothing visible; a blob found damaged is replaced, and a blob whose version never reached the catalog goes again."""

from __future__ import annotations

import errno
from collections.abc import Iterable

from schemas.backend import Fingerprint
from schemas.chunks import entry_digest
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import LayerStats, Manifest, TensorInfo, document_name
from schemas.samples import ParsedSample
from schemas.states import CompletionSource
from schemas.tensors import RawTensor
from schemas.timestamps import utc_now
from service.catalog.protocol import VersionCatalog
from service.errors import CorruptEntry, StorageFull
from service.storage.protocol import BlobStore


def new_manifest(
    key: EntryKey,
    featureset: FeatureSet,
    parsed: ParsedSample,
    hashed: str,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    completion_source: CompletionSource | str | None,
    tensors: Iterable[RawTensor],
    layer_stats: list[LayerStats],
    fingerprint: Fingerprint,
    flags: list[str],
) -> Manifest:
    """A version about to be recorded under `key`, its tensors hashing to `hashed`: all but what recording adds."""
    return Manifest(
        prompt_hash=key.prompt_hash,
        model_revision=key.model_revision,
        backend=key.backend,
        featureset=featureset,
        featureset_id=key.featureset_id,
        content_hash=hashed,
        sample_id=parsed.label,
        sample=parsed.identity,
        num_tokens=prompt_tokens + completion_tokens,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        completion_source=CompletionSource(completion_source) if completion_source is not None else None,
        tensors={t.name: TensorInfo(dtype=t.dtype, shape=list(t.shape)) for t in tensors},
        layer_stats=layer_stats,
        fingerprint=fingerprint,
        created_at=utc_now(),
        content_flags=flags,
    )


class Recorder:
    def __init__(self, store: BlobStore, versions: VersionCatalog) -> None:
        self.store = store
        self.versions = versions

    def record(self, manifest: Manifest, tensors: list[RawTensor]) -> tuple[Manifest, bool]:
        """Store a version whose tensors hash to its content hash; returns the stored manifest and whether it is new."""
        if content_hash(tensors) != manifest.content_hash:
            raise CorruptEntry(f"tensors do not hash to {manifest.content_hash}")
        return self.add(manifest, tensors)

    def add(self, manifest: Manifest, tensors: list[RawTensor]) -> tuple[Manifest, bool]:
        """`record` for tensors whose hash the caller has just taken: the manifest's content hash (an extraction's
        manifest is made from it, an import's is checked against it)."""
        if self._marked_corrupt(manifest.content_hash):  # re-extraction repairs: the damaged blob goes first
            self.store.delete(manifest.content_hash)
            self.versions.set_integrity(manifest.content_hash, None)
        stored = None
        try:
            stored = self.store.put_if_absent(manifest.content_hash, tensors)
            # the chunk digests go into the manifest: every later read of any part is checked against them
            chunks = {
                name: info.model_copy(update={"chunks": stored.chunks.get(name)})
                for name, info in manifest.tensors.items()
            }
            manifest = manifest.model_copy(
                update={
                    "tensors": chunks,
                    "chunks_digest": entry_digest({name: info.chunks for name, info in chunks.items()}),
                    "seq": None,
                    "audit": None,
                }
            )
            document = manifest.model_dump_json().encode()
            self.store.put_manifest(document_name(document), document)
            return self.versions.add(manifest)
        except BaseException as exc:
            if stored is not None and stored.written:
                self._drop_orphan(manifest.content_hash)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFull(f"the store has no room for {manifest.content_hash}: nothing was stored") from None
            raise

    def _marked_corrupt(self, content_hash: str) -> bool:
        return any(m.corrupt for m in self.versions.find(EntryFilter(content_hash=content_hash), limit=1))

    def _drop_orphan(self, content_hash: str) -> None:
        """A blob this write published whose version never made it into the catalog goes again, unless another
        version (of another key with the same bits) came to use it meanwhile."""
        if not self.versions.find(EntryFilter(content_hash=content_hash), limit=1):
            self.store.delete(content_hash)
