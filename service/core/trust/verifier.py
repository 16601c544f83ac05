"""The verifier: do the stored bytes still hold what was written? Reads a version's blob whole, checks every array's
metadata and every chunk against the manifest's record and the tensors against the content hash, and marks the
blob in the catalog: a corrupt one is never served as valid again until re-extraction rewrites it. A scrub of the
whole store remembers where it got to, so an interrupted one resumes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

from schemas.checks_api import VerifyReport, VerifyResult
from schemas.content_hash import content_hash
from schemas.keys import EntryFilter
from schemas.manifest import IntegrityRecord, Manifest
from schemas.states import Integrity
from schemas.timestamps import utc_now
from service.catalog.protocol import KeyValue, VersionStore
from service.storage.protocol import Blobs, Selection

RESUME_AFTER = "verify.after_seq"  # the catalog position a scrub has checked up to
_PAGE = 256
_REMEMBERED = 10_000  # content hashes a pass remembers having checked (a few MB, whatever the store's size)


class Verifier:
    def __init__(self, store: Blobs, versions: VersionStore, kv: KeyValue) -> None:
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
        `on_checked(done, total)` follows progress. Versions are read a page at a time and a sample is drawn
        through the catalog's index: memory stays bounded, and a sample costs the same in any size of store."""
        after = 0 if restart or sample is not None else int(self.kv.kv_get(RESUME_AFTER) or 0)
        if sample is not None:
            chosen = self.versions.sample(EntryFilter(), sample, seed)
            todo: Iterable[Manifest] = chosen
            total = len(chosen)
        else:
            todo, total = self._every(after), self.versions.count()
        corrupt: list[VerifyResult] = []
        checked_hashes: OrderedDict[str, IntegrityRecord] = OrderedDict()  # a blob shared by versions read once
        done = 0
        for done, manifest in enumerate(todo, 1):
            record = checked_hashes.get(manifest.content_hash) or self.check(manifest)
            checked_hashes[manifest.content_hash] = record
            if len(checked_hashes) > _REMEMBERED:
                checked_hashes.popitem(last=False)
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
            if sample is None:  # every version: a blob's read costs far more than this write
                self.kv.kv_set(RESUME_AFTER, str(manifest.seq))
            if on_checked is not None:
                on_checked(done, max(total, done))
        if sample is None:
            self.kv.kv_set(RESUME_AFTER, None)  # a whole pass done: the next one starts over
        return VerifyReport(checked=done, intact=done - len(corrupt), corrupt=corrupt, resumed_after=after)

    def _every(self, after: int) -> Iterator[Manifest]:
        while page := self.versions.find(EntryFilter(), limit=_PAGE, after_seq=after):
            yield from page
            after = page[-1].seq or after
