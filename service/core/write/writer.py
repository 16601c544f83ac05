"""The writer: extract what is missing — one forward per entry key at a time, however many requests ask — and have
each new version recorded (`Recorder`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Literal, get_args

from prometheus_client import Counter

from schemas.api import ExtractRequest, ExtractResponse, ExtractResult
from schemas.backend import Backend
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import Manifest
from schemas.resolution import nearest_version
from schemas.samples import ParsedSample
from schemas.states import CompletionSource, Existing, ExtractStatus
from service.catalog.protocol import VersionCatalog
from service.core.gpu_time.gate import ExtractionGate, configured
from service.core.write.canary import Canaries
from service.core.write.content_checks import ContentChecks
from service.core.write.prepare import PreparedSample, RequestPreparer
from service.core.write.recorder import Recorder, new_manifest
from service.core.write.single_flight import SingleFlight
from service.extraction.extractor import Extractor
from service.extraction.results import PendingExtraction
from service.model.manager import ModelManager
from service.settings import WRITER_THREADS

# sample index -> reference completion token ids and where they came from
Completions = Mapping[int, tuple[list[int], CompletionSource]]

_CANDIDATES = 10_000  # versions of one prompt looked through for a featureset holding another
WriteWait = Literal["between_forwards", "after_last"]
WRITE_WAITS: tuple[WriteWait, ...] = get_args(WriteWait)


def _label(index: int, parsed: ParsedSample) -> str:
    return f"samples[{index}]" + (f" ({parsed.label})" if parsed.label else "")


class InFlight:
    """Writes in flight, at most `limit` beyond those of the newest forward. The extracting thread waits only on a
    write of an earlier forward than the one it has just launched, so the GPU always has that forward queued: all of
    a pack's results go to the writers, however many it holds, before anything waits (waiting on the pack just
    launched would leave the GPU idle until its results were written). It counts how long the thread waited: between
    forwards (writers slower than the GPU) and after the last (the request's tail, with the GPU idle)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._writes: deque[tuple[int, Future[None]]] = deque()
        self.waited_s: dict[WriteWait, float] = dict.fromkeys(WRITE_WAITS, 0.0)

    def add(self, forward: int, write: Future[None]) -> None:
        self._writes.append((forward, write))
        started = time.perf_counter()
        while len(self._writes) > self.limit and self._writes[0][0] < forward:
            self._writes.popleft()[1].result()
        self.waited_s["between_forwards"] += time.perf_counter() - started

    def drain(self) -> None:
        started = time.perf_counter()
        try:
            while self._writes:
                self._writes.popleft()[1].result()
        finally:
            self.waited_s["after_last"] += time.perf_counter() - started


class FeatureWriter:
    def __init__(
        self,
        recorder: Recorder,
        versions: VersionCatalog,
        models: ModelManager[Extractor] | None,
        gate: ExtractionGate,
        preparer: RequestPreparer,
        checks: ContentChecks,
        canaries: Canaries | None,
        *,
        extracted_tokens: Counter,
        write_waits: Counter,
        writer_threads: int = WRITER_THREADS,
    ) -> None:
        self.recorder = recorder
        self.checks = checks
        self.canaries = canaries  # None: the key spaces' canaries are not checked (the `canary` setting)
        self.versions = versions
        self.models = models  # None on a replica without a model: it records imports only
        self.gate = gate
        self.preparer = preparer
        # by backend; by when the extracting thread waited on the writers (between forwards, after the last)
        self.extracted_tokens, self.write_waits = extracted_tokens, write_waits
        # Hashing, compression and writing overlap the next forward; a bound on results in flight bounds host memory.
        self._writers = ThreadPoolExecutor(max_workers=writer_threads, thread_name_prefix="hsstore-writer")
        self.max_in_flight = 2 * writer_threads
        self._flights: SingleFlight[EntryKey, Manifest] = SingleFlight()

    def close(self) -> None:
        self._writers.shutdown(wait=True)

    def _stored(
        self, existing: list[Manifest], key: EntryKey, featureset: FeatureSet, rule: Existing
    ) -> Manifest | None:
        """What counts as stored already: the key's newest version unless it is corrupt (then it is extracted
        again, its repair); with no version and `holding`, the nearest entry of a featureset holding this one."""
        if existing:
            return None if existing[0].corrupt else existing[0]
        return self._holding(key, featureset) if rule == Existing.HOLDING else None

    def _holding(self, key: EntryKey, featureset: FeatureSet) -> Manifest | None:
        """The newest sound version of the stored entry nearest `featureset` among those of the key's model
        revision and backend whose featureset holds it (a union of recipes' layers serves each recipe's reads)."""
        where = EntryFilter(prompt_hash=key.prompt_hash, model_revision=key.model_revision, backend=key.backend)
        return nearest_version(self.versions.find(where, limit=_CANDIDATES), featureset)

    def extract(
        self, request: ExtractRequest, *, run_now: bool = False, completions: Completions | None = None
    ) -> ExtractResponse:
        """`completions`: reference completions fetched earlier, used instead of generating greedy ones here."""
        self.gate.check(run_now)
        models = configured(self.models)
        prepared = self.preparer.prepare(models.spec, request.samples, request.featureset, [request.backend])
        featureset, (backend,) = prepared.featureset, prepared.backends
        samples = [
            _with_completion(s, completions.get(i)) if completions else s for i, s in enumerate(prepared.samples)
        ]

        results: list[ExtractResult | None] = [None] * len(samples)
        todo: list[tuple[int, EntryKey, bool]] = []  # what this request extracts: it leads these keys' flights
        led: dict[EntryKey, Future[Manifest]] = {}
        following: list[tuple[int, Future[Manifest]]] = []  # what another request is extracting right now
        for index, sample in enumerate(samples):
            key = EntryKey(sample.parsed.prompt_hash, models.spec.revision, backend.value, featureset.id)
            existing = self.versions.versions(key)
            if not request.force:
                stored = self._stored(existing, key, featureset, request.existing)
                if stored is not None:
                    results[index] = _result(sample.parsed, ExtractStatus.EXISTING, stored)
                    continue
            flight, leads = self._flights.join(key)
            if leads:
                todo.append((index, key, bool(existing)))
                led[key] = flight
            else:
                following.append((index, flight))

        def write(position: int, pending: PendingExtraction) -> None:
            index, key, had_versions = todo[position]
            parsed = samples[index].parsed
            try:
                extraction = pending.wait()
                tokens = extraction.prompt_tokens + extraction.completion_tokens
                flags = self.checks.check(key, extraction.layer_stats, extraction.rows, tokens)
                # the manifest is made from these tensors' hash: added without hashing them again
                manifest = new_manifest(
                    key,
                    featureset,
                    parsed,
                    content_hash(extraction.tensors),
                    prompt_tokens=extraction.prompt_tokens,
                    completion_tokens=extraction.completion_tokens,
                    completion_source=extraction.completion_source,
                    tensors=extraction.tensors,
                    layer_stats=extraction.layer_stats,
                    fingerprint=extraction.fingerprint,
                    flags=flags,
                )
                stored, added = self.recorder.add(manifest, extraction.tensors)
            except BaseException as exc:
                self._flights.land(key, led[key], error=exc)
                raise
            self._flights.land(key, led[key], stored)
            if added:
                self.extracted_tokens.labels(key.backend).inc(stored.num_tokens)
                status = ExtractStatus.VERSION_ADDED if had_versions else ExtractStatus.EXTRACTED
            else:
                status = ExtractStatus.EXISTING
            results[index] = _result(parsed, status, stored)

        try:
            self._extract_and_write(todo, samples, featureset, backend, write)
        except BaseException as exc:
            for key, flight in led.items():  # followers of what never got written hear why
                self._flights.land(key, flight, error=exc)
            raise
        for index, flight in following:
            results[index] = _result(samples[index].parsed, ExtractStatus.EXISTING, flight.result())
        done = [r for r in results if r is not None]
        extracted = sum(r.status != ExtractStatus.EXISTING for r in done)
        return ExtractResponse(results=done, extracted=extracted, existing=len(done) - extracted)

    def _extract_and_write(
        self,
        todo: list[tuple[int, EntryKey, bool]],
        samples: list[PreparedSample],
        featureset: FeatureSet,
        backend: Backend,
        write: Callable[[int, PendingExtraction], None],
    ) -> None:
        """The forwards on this thread, the writes on the writer threads, a bounded number in flight (InFlight)."""
        if not todo:
            return
        models = configured(self.models)
        items = [(samples[i].encoded, _label(i, samples[i].parsed)) for i, _, _ in todo]
        in_flight = InFlight(self.max_in_flight)
        with models.using() as extractor:
            models.emit("extract")
            if self.canaries is not None:
                self.canaries.check(extractor, models.spec, backend)  # once per loaded model and backend
            try:
                for position, pending in extractor.extract_many(items, featureset, backend):
                    in_flight.add(pending.forward, self._writers.submit(write, position, pending))
            finally:
                try:
                    in_flight.drain()
                finally:
                    for when, seconds in in_flight.waited_s.items():
                        self.write_waits.labels(when).inc(seconds)


def _with_completion(sample: PreparedSample, completion: tuple[list[int], CompletionSource] | None) -> PreparedSample:
    """A sample that asks for a greedy completion, given the one fetched for it earlier."""
    if completion is None or sample.encoded.greedy_max_new_tokens is None:
        return sample
    ids, source = completion
    encoded = replace(sample.encoded, completion_ids=list(ids), completion_source=source, greedy_max_new_tokens=None)
    return replace(sample, encoded=encoded)


def _result(parsed: ParsedSample, status: ExtractStatus, manifest: Manifest) -> ExtractResult:
    return ExtractResult(prompt_hash=parsed.prompt_hash, sample_id=parsed.label, status=status, manifest=manifest)
