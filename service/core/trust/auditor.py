"""The auditor: does what is stored still hold? Compares two backends' features for one prompt, re-extracts stored
versions to check that each reproduces its content hash bit for bit, and spot-checks imports never checked against
the model (or suspect) when its weights are at hand."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

from schemas.api import ExtractRequest
from schemas.backend import UNKNOWN_BACKEND, Backend
from schemas.checks_api import AuditReport, AuditResult, CompareReport
from schemas.content_hash import content_hash
from schemas.keys import EntryFilter, FeatureKey
from schemas.manifest import AuditRecord, Manifest
from schemas.states import AuditStatus, CompletionSource, Integrity
from schemas.timestamps import utc_now
from service.catalog.protocol import VersionStore
from service.core.gpu_time.gate import ExtractionGate, configured
from service.core.read.comparison import compare_hidden_states
from service.core.read.reader import FeatureReader
from service.core.trust.import_checks import ImportChecks
from service.core.trust.verifier import Verifier
from service.core.write.prepare import RequestPreparer
from service.core.write.writer import FeatureWriter
from service.errors import AmbiguousEntry, EntryNotFound, InvalidRequest, RevisionUnavailable
from service.extraction.extractor import Extractor
from service.model.loader import ModelSpec
from service.model.manager import ModelManager

_PAGE = 1_000


class Auditor:
    def __init__(
        self,
        reader: FeatureReader,
        writer: FeatureWriter,
        versions: VersionStore,
        models: ModelManager[Extractor] | None,
        gate: ExtractionGate,
        preparer: RequestPreparer,
        verifier: Verifier,
        spot_checks: ImportChecks,
    ) -> None:
        self.verifier = verifier
        self.spot_checks = spot_checks
        self.reader = reader
        self.writer = writer
        self.versions = versions
        self.models = models
        self.gate = gate
        self.preparer = preparer

    def compare(self, key: FeatureKey, a: str, b: str, extract_missing: bool = False) -> CompareReport:
        """Compare the newest versions of two backends' entries for one prompt (imported ones, `unknown`, too),
        extracting a missing side if allowed and a host can run its backend (`key.backend` is ignored: the two sides
        name theirs)."""
        extracted: list[str] = []
        sides: list[Manifest] = []
        for backend in (a, b):
            side = key.model_copy(update={"backend": backend})
            try:
                sides.append(self.reader.resolve(side))
            except EntryNotFound:
                if not extract_missing or backend == UNKNOWN_BACKEND:
                    raise
                sides.append(self._extract_like(side, Backend(backend)))
                extracted.append(backend)
        first, second = sides
        if (first.model_revision, first.featureset_id) != (second.model_revision, second.featureset_id):
            raise AmbiguousEntry("the two entries differ in model_revision or featureset; name both")
        left, right = self.reader.read(first), self.reader.read(second)
        if bytes(left.tensors["input_ids"].data) != bytes(right.tensors["input_ids"].data):
            raise InvalidRequest("the two entries hold different tokens, so their features cannot be compared")
        return CompareReport(
            prompt_hash=key.prompt_hash,
            model_revision=first.model_revision,
            featureset_id=first.featureset_id,
            num_tokens=first.num_tokens,
            a=a,
            b=b,
            a_content_hash=first.content_hash,
            b_content_hash=second.content_hash,
            extracted=extracted,
            layers=compare_hidden_states(left.tensors, right.tensors, list(first.featureset.layers)),
        )

    def _extract_like(self, key: FeatureKey, backend: Backend) -> Manifest:
        """Extract `backend`'s entry for a prompt whose sample is known from another stored entry."""
        spec = configured(self.models).spec
        if key.model_revision not in (None, spec.revision):
            raise RevisionUnavailable(f"this service runs model_revision {spec.revision}; it cannot extract another")
        known = self.versions.find(EntryFilter(prompt_hash=key.prompt_hash, featureset_id=key.featureset_id), limit=1)
        if not known:
            raise EntryNotFound(
                f"no entry for prompt_hash {key.prompt_hash}: its sample is unknown, so nothing to extract"
            )
        request = ExtractRequest(samples=[known[0].sample], featureset=known[0].featureset, backend=backend.value)
        return self.writer.extract(request).results[0].manifest

    def audit(
        self, sample: int, backend: str | None = None, seed: int | None = None, imports: bool = False
    ) -> AuditReport:
        """Re-extract `sample` stored versions (each alone, under the policy its fingerprint names) and record whether
        each reproduces its content hash bit for bit; `imports`: spot-check imported ones instead."""
        self.gate.check()
        models = configured(self.models)
        spec = models.spec
        if imports:
            return self._audit_imports(sample, backend)
        available = set(spec.available_backends())
        stored = [
            t for t in self.versions.tallies() if t.model_revision == spec.revision and backend in (None, t.backend)
        ]
        unrunnable = sum(t.entries for t in stored if t.backend not in available)
        # drawn from the backends this host runs; an import is not re-extracted (nothing says what computed it):
        # `imports` checks those
        chosen = [
            manifest
            for run in sorted({t.backend for t in stored} & available)
            for manifest in self.versions.sample(
                EntryFilter(model_revision=spec.revision, backend=run),
                sample,
                seed,
                accept=lambda m: m.fingerprint.imported_from is None,
            )
        ]
        chosen = random.Random(seed).sample(chosen, min(sample, len(chosen)))
        results = []
        with models.using() as extractor:
            for manifest in chosen:
                results.append(self._audit_one(spec, extractor, manifest))
        return _report(results, unrunnable, f"{unrunnable} stored versions need a backend this host lacks")

    def _audit_one(self, spec: ModelSpec, extractor: Extractor, manifest: Manifest) -> AuditResult:
        """Read and check the stored bytes first (an audit that only re-extracted would call a damaged entry
        reproduced), then re-extract and compare hashes."""
        stored = self.verifier.check(manifest).status
        encoded = self.preparer.sample(spec, manifest.sample).encoded
        if manifest.completion_source == CompletionSource.GREEDY_SGLANG:  # not ours to re-ask: reuse its tokens
            completion = self.reader.token_ids(manifest)[manifest.prompt_tokens :]
            encoded = replace(
                encoded,
                completion_ids=completion,
                completion_source=manifest.completion_source,
                greedy_max_new_tokens=None,
            )
        again = extractor.extract(  # alone, under the policy and attention kernel that made it
            encoded,
            manifest.featureset,
            Backend(manifest.backend),
            f"audit of {manifest.prompt_hash[:16]}",
            manifest.fingerprint.batching,
            manifest.fingerprint.attention_kernel,
        )
        reproduced_hash = content_hash(again.tensors)
        ok = reproduced_hash == manifest.content_hash
        record = AuditRecord(
            status=AuditStatus.REPRODUCED if ok else AuditStatus.MISMATCH,
            audited_at=utc_now(),
            reproduced_hash=reproduced_hash,
            fingerprint=again.fingerprint,
        )
        self.versions.set_audit(manifest.key, manifest.content_hash, record)
        return AuditResult(
            prompt_hash=manifest.prompt_hash,
            backend=manifest.backend,
            featureset_id=manifest.featureset_id,
            content_hash=manifest.content_hash,
            stored=stored,
            reproduced=ok and stored == Integrity.INTACT,
            reproduced_hash=reproduced_hash,
        )

    def _audit_imports(self, sample: int, backend: str | None) -> AuditReport:
        """The spot check of up to `sample` imports of this revision never checked against the model, suspect ones
        first, each read (and its stored bytes checked) first; the verdict is recorded on each version."""
        spec = configured(self.models).spec

        def ours(m: Manifest) -> bool:
            imported = m.fingerprint.imported_from is not None
            return imported and m.model_revision == spec.revision and backend in (None, m.backend)

        marked_statuses = {AuditStatus.SUSPECT, AuditStatus.UNCHECKED}
        # the marked ones first, all found through the index of what needs attention; then any never checked
        marked = [
            m
            for m in _every(self.versions.needing_attention)
            if ours(m) and m.audit is not None and m.audit.status in marked_statuses
        ]
        where = EntryFilter(model_revision=spec.revision, backend=backend)
        never = (m for m in _every(partial(self.versions.find, where)) if ours(m) and m.audit is None)
        due = marked[:sample] + list(itertools.islice(never, max(0, sample - len(marked))))
        results = []
        for manifest in due[:sample]:
            tensors = self.reader.read(manifest).tensors
            agreement = self.spot_checks.check_stored(manifest, tensors)
            results.append(
                AuditResult(
                    prompt_hash=manifest.prompt_hash,
                    backend=manifest.backend,
                    featureset_id=manifest.featureset_id,
                    content_hash=manifest.content_hash,
                    reproduced=agreement.agrees,
                    detail=agreement.describe(),
                )
            )
        left = max(0, len(marked) - sample)
        return _report(results, left, f"{left} more marked imports are due a check (a larger sample checks them)")


def _every(page: Callable[..., list[Manifest]]) -> Iterator[Manifest]:
    """Every version a paged call (`find`, `needing_attention`) returns, a page at a time."""
    after = 0
    while found := page(limit=_PAGE, after_seq=after):
        yield from found
        after = found[-1].seq or after


def _report(results: list[AuditResult], skipped: int, why_skipped: str) -> AuditReport:
    reproduced = sum(r.reproduced for r in results)
    return AuditReport(
        total=len(results),
        reproduced=reproduced,
        mismatched=len(results) - reproduced,
        skipped=skipped,
        skipped_reason=why_skipped if skipped else None,
        results=results,
    )
