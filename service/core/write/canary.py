"""A canary per key space: one truth per key, across library upgrades and GPUs.

Entries are keyed by prompt, model revision, backend and featureset, not by library versions or GPU: a torch or fla
upgrade, or a faulty GPU, that changes the bits would put a second truth under keys that already hold one. So the
first time this store sees a (model revision, backend, policy) — policy: the fingerprint's batching, elementwise
path and pinned attention kernel — the extracting host extracts a fixed canary sample through every layer and
records its content hash with its fingerprint in the catalog. After every model load (each worker, each window),
before the first extraction under a backend, the host extracts the canary again; if the bits differ it refuses to
extract under that key space (`CanaryMismatch`, 500 `backend_mismatch`, nothing stored), naming what changed between
the two fingerprints.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any

from pydantic import BaseModel

from schemas.backend import Backend, Fingerprint
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.samples import parse_sample
from schemas.timestamps import utc_now
from service.catalog.protocol import KeyValue
from service.errors import BackendMismatch
from service.extraction.extractor import Extractor
from service.model.loader import ModelSpec

CANARY_TOKENS = 48  # a fixed sample: token ids 1.. (modulo the vocabulary), every layer extracted


class CanaryRecord(BaseModel):
    content_hash: str
    fingerprint: Fingerprint
    recorded_at: str


class CanaryMismatch(BackendMismatch):
    """The canary's bits under this key space are not those recorded: extraction here would store a second truth."""


def canary_ids(vocab_size: int) -> list[int]:
    return [1 + i % (vocab_size - 1) for i in range(CANARY_TOKENS)]


class Canaries:
    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self._checked: weakref.WeakKeyDictionary[Extractor, set[Backend]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def check(self, extractor: Extractor, spec: ModelSpec, backend: Backend) -> None:
        """Once per loaded model and backend: record the canary (first time) or compare with the record."""
        with self._lock:
            if backend in self._checked.get(extractor, set()):
                return
            encoded = spec.encode(parse_sample({"token_ids": canary_ids(spec.vocab_size)}), CANARY_TOKENS)
            every_layer = FeatureSet(layers=list(range(spec.num_layers)))
            extraction = extractor.extract(encoded, every_layer, backend, "canary")
            fingerprint = extraction.fingerprint
            name = _record_name(spec.revision, backend, fingerprint)
            found = CanaryRecord(
                content_hash=content_hash(extraction.tensors), fingerprint=fingerprint, recorded_at=utc_now()
            )
            recorded = self.kv.kv_get(name)
            if recorded is None:
                self.kv.kv_set(name, found.model_dump_json())
            else:
                _compare(CanaryRecord.model_validate_json(recorded), found, spec.revision, backend)
            self._checked.setdefault(extractor, set()).add(backend)


def _record_name(revision: str, backend: Backend, fingerprint: Fingerprint) -> str:
    parts = [fingerprint.batching, fingerprint.elementwise]
    if fingerprint.attention_kernel is not None:  # a store's canaries from before the pin keep their names
        parts.append(fingerprint.attention_kernel)
    policy = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"canary:{revision}:{backend.value}:{policy}"


def _compare(recorded: CanaryRecord, found: CanaryRecord, revision: str, backend: Backend) -> None:
    if recorded.content_hash == found.content_hash:
        return
    was: dict[str, Any] = recorded.fingerprint.model_dump()
    now: dict[str, Any] = found.fingerprint.model_dump()
    changed = [
        f"{field} {was.get(field)!r} -> {now.get(field)!r}" for field in sorted(now) if was.get(field) != now.get(field)
    ]
    what = "; ".join(changed) or "nothing in the fingerprint changed: the GPU or the weights on disk are suspect"
    raise CanaryMismatch(
        f"the canary sample's bits under model_revision {revision}, backend {backend.value} differ from those "
        f"recorded {recorded.recorded_at} ({what}): extracting here would put a second truth under keys that hold "
        "one, so nothing is extracted; run the recorded setup again, or extract under a new model revision"
    )
