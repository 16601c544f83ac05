"""The verifier: do the stored bytes still hold what was written? Reads a version's blob whole, checks every array's
metadata and every chunk against the manifest's record and the tensors against the content hash, and marks the
blob in the catalog: a corrupt one is never served as valid again until re-extraction rewrites it. A scrub of the
whole store remembers where it got to, so an interrupted one resumes."""

from __future__ import annotations

import random
from collections.abc import Callable

from schemas.api import VerifyReport, VerifyResult
from schemas.content_hash import content_hash
from schemas.keys import EntryFilter
from schemas.manifest import IntegrityRecord, Manifest
from schemas.states import Integrity
from schemas.timestamps import utc_now
from service.catalog.protocol import KeyValue, VersionCatalog
from service.storage.protocol import Blobs, Selection

RESUME_AFTER = "verify.after_seq"  # the catalog position a scrub has checked up to
_PAGE = 256


class Verifier:
    def __init__(self, store: Blobs, versions: VersionCatalog, kv: KeyValue) -> None:
        self.store = store
        self.versions = versions
        self.kv = kv

    def check(self, manifest: Manifest) -> IntegrityRecord:
        """Read and check one version's stored bytes, and record what was found."""
        detail = None
        try:
            tensors = self.store.get_slice(manifest.content_hash, Selection(), manifest.tensors)
            if content_hash(tensors.values()) != manifest.content_hash:
                detail = "its tensors no longer hash to its content hash"
        except KeyError:
            detail = "its blob is missing"
        except (ValueError, OSError) as exc:
            detail = f"its bytes or metadata differ from what was written ({type(exc).__name__})"
        status = Integrity.INTACT if detail is None else Integrity.CORRUPT
        record = IntegrityRecord(status=status, checked_at=utc_now(), detail=detail)
        self.versions.set_integrity(manifest.content_hash, record)
        return record

    def scrub(
        self,
        sample: int | None = None,
        restart: bool = False,
        seed: int | None = None,
        on_checked: Callable[[int, int], None] | None = None,
    ) -> VerifyReport:
        """Check every version (from where the last scrub stopped, unless `restart`), or a random `sample` of them.
        `on_checked(done, total)` follows progress."""
        after = 0 if restart or sample is not None else int(self.kv.kv_get(RESUME_AFTER) or 0)
        todo = self._versions(after)
        if sample is not None:
            todo = random.Random(seed).sample(todo, min(sample, len(todo)))
        corrupt: list[VerifyResult] = []
        checked_hashes: dict[str, IntegrityRecord] = {}  # a blob shared by several versions is read once
        for done, manifest in enumerate(todo, 1):
            record = checked_hashes.get(manifest.content_hash) or self.check(manifest)
            checked_hashes[manifest.content_hash] = record
            if record.status == Integrity.CORRUPT:
                corrupt.append(
                    VerifyResult(
                        prompt_hash=manifest.prompt_hash,
                        backend=manifest.backend,
                        content_hash=manifest.content_hash,
                        status=record.status,
                        detail=record.detail,
                    )
                )
            if sample is None:
                self.kv.kv_set(RESUME_AFTER, str(manifest.seq))
            if on_checked is not None:
                on_checked(done, len(todo))
        if sample is None:
            self.kv.kv_set(RESUME_AFTER, None)  # a whole pass done: the next one starts over
        return VerifyReport(checked=len(todo), intact=len(todo) - len(corrupt), corrupt=corrupt, resumed_after=after)

    def _versions(self, after: int) -> list[Manifest]:
        found: list[Manifest] = []
        while page := self.versions.find(EntryFilter(), limit=_PAGE, after_seq=after):
            found.extend(page)
            after = page[-1].seq or after
        return found
