"""The core: extract what is missing, record versions, resolve keys and read features. Routes call only this."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from schemas import wire
from schemas.api import (
    AuditReport,
    AuditResult,
    CompareReport,
    EntriesPage,
    ExtractRequest,
    ExtractResponse,
    ExtractResult,
)
from schemas.backend import Backend
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet, LayerId
from schemas.keys import EntryKey, version_name
from schemas.manifest import AuditRecord, Manifest, TensorInfo
from schemas.samples import InvalidSampleError, ParsedSample, parse_sample
from schemas.tensors import RawTensor, TensorLayout
from schemas.tokens import TokenRange
from service.catalog.protocol import Catalog, EntryFilter
from service.comparison import compare_hidden_states
from service.errors import (
    AmbiguousEntry,
    CorruptEntry,
    EntryNotFound,
    InvalidRequest,
    InvalidSample,
    ModelUnavailable,
    WindowClosed,
)
from service.extraction.encode import EncodedPrompt
from service.extraction.extractor import Extraction, PendingExtraction
from service.metrics import Metrics
from service.model.manager import ModelManager
from service.storage.protocol import BlobStore, Selection
from service.windows import Windows


def _label(index: int, parsed: ParsedSample) -> str:
    return f"samples[{index}]" + (f" ({parsed.label})" if parsed.label else "")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Served:
    """Tensors as served, with what part of the entry they are."""

    manifest: Manifest
    tensors: dict[str, RawTensor]
    layers: list[LayerId]
    tokens: tuple[int, int]
    served_hash: str

    @property
    def full(self) -> bool:
        return self.served_hash == self.manifest.content_hash

    def metadata(self) -> dict[str, str]:
        return wire.served_metadata(
            self.manifest.model_dump_json(), self.layers, self.tokens, self.served_hash, self.full
        )


# A slice's served hash is only known once it is read; it always has this many characters, which is all a header's
# length depends on.
_HASH_PLACEHOLDER = "sha256:" + "0" * 64


class FeatureLibrary:
    def __init__(
        self,
        store: BlobStore,
        catalog: Catalog,
        models: ModelManager | None,
        windows: Windows | None = None,
        *,
        default_backend: str = "auto",
        max_sample_tokens: int = 32768,
        writer_threads: int = 4,
        verify_reads: str = "chunks",
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.models = models
        self.windows = windows
        self.default_backend = default_backend
        self.max_sample_tokens = max_sample_tokens
        self.verify_reads = verify_reads
        self.metrics = Metrics()
        # Hashing, compression and writing overlap the next forward; a bound on results in flight bounds host memory.
        self._writers = ThreadPoolExecutor(max_workers=writer_threads, thread_name_prefix="hsstore-writer")
        self.max_in_flight = 2 * writer_threads

    def close(self) -> None:
        self._writers.shutdown(wait=True)
        self.catalog.close()

    # -- extraction ----------------------------------------------------------------------------------------------
    def require_models(self) -> ModelManager:
        if self.models is None:
            raise ModelUnavailable("this replica has no model configured: it serves stored features only")
        return self.models

    def require_window(self) -> None:
        """Extraction belongs to the GPU's downtime window (unless an admin runs a job now)."""
        if self.windows is not None and not self.windows.state().open:
            raise WindowClosed(
                "the extraction window is closed (SGLang has the GPU); open one with "
                "`hsstore window open --minutes N`, or submit a job that waits for the next window"
            )

    def default_featureset(self) -> FeatureSet | None:
        return FeatureSet.default_for(self.models.spec.num_layers) if self.models else None

    def extract(
        self,
        request: ExtractRequest,
        *,
        run_now: bool = False,
        completions: Mapping[int, tuple[list[int], str]] | None = None,
    ) -> ExtractResponse:
        """`completions`: reference completions fetched earlier (sample index -> token ids, source), used instead of
        generating a greedy completion with the target."""
        spec = self.require_models().spec
        if not run_now:
            self.require_window()
        featureset = request.featureset or FeatureSet.default_for(spec.num_layers)
        try:
            featureset.check_against(spec.num_layers)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        backend = spec.resolve_backend(request.backend if request.backend != "auto" else self.default_backend)

        # Validate and tokenise every sample before extracting any, so a bad one changes nothing.
        prepared: list[tuple[ParsedSample, EncodedPrompt]] = []
        for index, raw in enumerate(request.samples):
            try:
                parsed = parse_sample(raw, index)
            except InvalidSampleError as exc:
                raise InvalidSample(str(exc)) from None
            encoded = spec.encode(parsed, self.max_sample_tokens, index)
            if completions and index in completions and encoded.greedy_max_new_tokens is not None:
                ids, source = completions[index]
                encoded = replace(
                    encoded, completion_ids=list(ids), completion_source=source, greedy_max_new_tokens=None
                )
            prepared.append((parsed, encoded))

        results: list[ExtractResult | None] = [None] * len(prepared)
        todo: list[tuple[int, EntryKey, bool]] = []
        for index, (parsed, _) in enumerate(prepared):
            key = EntryKey(parsed.prompt_hash, spec.revision, backend.value, featureset.id)
            existing = self.catalog.versions(key)
            if existing and not request.force:
                results[index] = ExtractResult(
                    prompt_hash=key.prompt_hash, sample_id=parsed.label, status="existing", manifest=existing[0]
                )
            else:
                todo.append((index, key, bool(existing)))

        def write(position: int, pending: PendingExtraction) -> None:
            index, key, had_versions = todo[position]
            parsed = prepared[index][0]
            extraction = pending.wait()
            # _manifest hashed the tensors just now: record them without hashing again
            stored, added = self._record(self._manifest(key, featureset, parsed, extraction), extraction.tensors)
            status = "existing" if not added else ("version_added" if had_versions else "extracted")
            if added:
                self.metrics.extracted_tokens.labels(key.backend).inc(stored.num_tokens)
            results[index] = ExtractResult(
                prompt_hash=key.prompt_hash, sample_id=parsed.label, status=status, manifest=stored
            )

        items = [(prepared[i][1], _label(i, prepared[i][0])) for i, _, _ in todo]
        in_flight: deque[Future[None]] = deque()
        extractor = self.require_models().extractor() if items else None
        if extractor is not None:
            self.require_models().emit("extract")
        try:
            for position, pending in extractor.extract_many(items, featureset, backend) if extractor else ():
                in_flight.append(self._writers.submit(write, position, pending))
                while len(in_flight) > self.max_in_flight:
                    in_flight.popleft().result()
        finally:
            for future in in_flight:
                future.result()
        done = [r for r in results if r is not None]
        extracted = sum(r.status != "existing" for r in done)
        return ExtractResponse(results=done, extracted=extracted, existing=len(done) - extracted)

    @staticmethod
    def _manifest(key: EntryKey, featureset: FeatureSet, parsed: ParsedSample, extraction: Extraction) -> Manifest:
        return Manifest(
            prompt_hash=key.prompt_hash,
            model_revision=key.model_revision,
            backend=key.backend,
            featureset=featureset,
            featureset_id=key.featureset_id,
            content_hash=content_hash(extraction.tensors),
            sample_id=parsed.label,
            sample=parsed.identity,
            num_tokens=extraction.prompt_tokens + extraction.completion_tokens,
            prompt_tokens=extraction.prompt_tokens,
            completion_tokens=extraction.completion_tokens,
            completion_source=extraction.completion_source,
            tensors={t.name: TensorInfo(dtype=t.dtype, shape=list(t.shape)) for t in extraction.tensors},
            layer_stats=extraction.layer_stats,
            fingerprint=extraction.fingerprint,
            created_at=now(),
        )

    def record(self, manifest: Manifest, tensors: list[RawTensor]) -> tuple[Manifest, bool]:
        """Blob first, then its manifest document, then the catalog row: a crash at any point leaves no visible
        partial entry, and redoing the write completes it."""
        if content_hash(tensors) != manifest.content_hash:
            raise CorruptEntry(f"tensors do not hash to {manifest.content_hash}")
        return self._record(manifest, tensors)

    def _record(self, manifest: Manifest, tensors: list[RawTensor]) -> tuple[Manifest, bool]:
        self.store.put_if_absent(manifest.content_hash, tensors)
        document = manifest.model_copy(update={"seq": None, "audit": None}).model_dump_json().encode()
        self.store.put_manifest(version_name(manifest.key, manifest.content_hash), document)
        return self.catalog.add(manifest)

    def rebuild_catalog(self) -> int:
        """Re-add every version whose manifest document and blob exist (after losing the catalog)."""
        added = 0
        for document in self.store.iter_manifests():
            manifest = Manifest.model_validate_json(document)
            if self.store.exists(manifest.content_hash):
                added += self.catalog.add(manifest)[1]
        return added

    # -- reading -------------------------------------------------------------------------------------------------
    def resolve(
        self,
        prompt_hash: str,
        model_revision: str | None = None,
        backend: str | None = None,
        featureset_id: str | None = None,
        content_hash_pin: str | None = None,
    ) -> Manifest:
        """The newest version of the one entry matching; a key part left out must be unambiguous."""
        where = EntryFilter(prompt_hash, model_revision, backend, featureset_id, content_hash_pin)
        found = self.catalog.find(where, limit=10_000)
        if not found:
            stored = self.catalog.find(EntryFilter(prompt_hash=prompt_hash), limit=10_000)
            if not stored:
                raise EntryNotFound(f"no entry for prompt_hash {prompt_hash}")
            raise EntryNotFound(
                f"no entry for prompt_hash {prompt_hash} with {_describe(where)}; stored: {_describe_keys(stored)}"
            )
        keys = {m.key for m in found}
        if len(keys) > 1:
            raise AmbiguousEntry(
                f"prompt_hash {prompt_hash} has {len(keys)} entries ({_describe_keys(found)}); "
                "name model_revision, backend and/or featureset"
            )
        return max(found, key=lambda m: m.seq or 0)

    def selection_for(self, manifest: Manifest, layers: list[LayerId] | None, tokens: TokenRange | None) -> Selection:
        """The store selection for `layers` and `tokens` of an entry; InvalidRequest if they are not in it."""
        stored_layers = list(manifest.featureset.layers)
        positions: tuple[int, ...] | None = None
        if layers is not None:
            missing = [layer for layer in layers if layer not in stored_layers]
            if missing:
                raise InvalidRequest(f"layers {missing} are not in this entry (it holds layers {stored_layers})")
            positions = tuple(stored_layers.index(layer) for layer in layers)
            if positions == tuple(range(len(stored_layers))):
                positions = None
        span = (0, manifest.num_tokens)
        if tokens is not None:
            try:
                span = tokens.resolve(manifest.num_tokens)
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None
        return Selection(positions, None if span == (0, manifest.num_tokens) else span)

    def read(self, manifest: Manifest, layers: list[LayerId] | None = None, tokens: TokenRange | None = None) -> Served:
        """Every chunk read is checked against its crc32c; with `verify_reads="content_hash"` a full read is also
        re-hashed here (the client verifies the content hash on receipt either way)."""
        selection = self.selection_for(manifest, layers, tokens)
        span = selection.tokens or (0, manifest.num_tokens)
        try:
            tensors = self.store.get_slice(manifest.content_hash, selection)
        except KeyError:
            raise CorruptEntry(f"the catalog lists {manifest.content_hash} but its blob is missing") from None
        except ValueError as exc:  # a chunk or shard index failed its crc32c check
            raise CorruptEntry(f"{manifest.content_hash}: {exc}") from None
        if selection.is_everything:
            served_hash = manifest.content_hash
            if self.verify_reads == "content_hash" and content_hash(tensors.values()) != manifest.content_hash:
                raise CorruptEntry(f"stored bytes of {manifest.content_hash} no longer hash to it")
        else:
            served_hash = content_hash(tensors.values())
        return Served(manifest, tensors, _served_layers(manifest, selection), span, served_hash)

    def served_length(
        self, manifest: Manifest, layers: list[LayerId] | None = None, tokens: TokenRange | None = None
    ) -> int:
        """The length of the body `read` of this selection would be served as, without reading the blob (HEAD)."""
        selection = self.selection_for(manifest, layers, tokens)
        span = selection.tokens or (0, manifest.num_tokens)
        served_layers = _served_layers(manifest, selection)
        layout = []
        for name, info in manifest.tensors.items():
            shape = [span[1] - span[0], *info.shape[1:]]
            if name == "hidden_states":
                shape[1] = len(served_layers)
            layout.append(TensorLayout(name, info.dtype, tuple(shape)))
        full = selection.is_everything
        served_hash = manifest.content_hash if full else _HASH_PLACEHOLDER
        metadata = wire.served_metadata(manifest.model_dump_json(), served_layers, span, served_hash, full)
        return wire.body_length(layout, metadata)

    def compare(
        self,
        prompt_hash: str,
        a: Backend,
        b: Backend,
        model_revision: str | None = None,
        featureset_id: str | None = None,
        extract_missing: bool = False,
    ) -> CompareReport:
        """Compare the newest versions of two backends' entries for one prompt, extracting a missing side if allowed."""
        extracted: list[str] = []
        sides: list[Manifest] = []
        for backend in (a, b):
            try:
                sides.append(self.resolve(prompt_hash, model_revision, backend.value, featureset_id))
            except EntryNotFound:
                if not extract_missing:
                    raise
                sides.append(self._extract_like(prompt_hash, backend, model_revision, featureset_id))
                extracted.append(backend.value)
        first, second = sides
        if (first.model_revision, first.featureset_id) != (second.model_revision, second.featureset_id):
            raise AmbiguousEntry("the two entries differ in model_revision or featureset; name both")
        left, right = self.read(first), self.read(second)
        if bytes(left.tensors["input_ids"].data) != bytes(right.tensors["input_ids"].data):
            raise InvalidRequest("the two entries hold different tokens, so their features cannot be compared")
        return CompareReport(
            prompt_hash=prompt_hash,
            model_revision=first.model_revision,
            featureset_id=first.featureset_id,
            num_tokens=first.num_tokens,
            a=a.value,
            b=b.value,
            a_content_hash=first.content_hash,
            b_content_hash=second.content_hash,
            extracted=extracted,
            layers=compare_hidden_states(
                left.tensors["hidden_states"], right.tensors["hidden_states"], list(first.featureset.layers)
            ),
        )

    def _extract_like(
        self, prompt_hash: str, backend: Backend, model_revision: str | None, featureset_id: str | None
    ) -> Manifest:
        """Extract `backend`'s entry for a prompt whose sample is known from another stored entry."""
        spec = self.require_models().spec
        if model_revision not in (None, spec.revision):
            raise InvalidRequest(f"this service runs model_revision {spec.revision}; it cannot extract another")
        known = self.catalog.find(EntryFilter(prompt_hash=prompt_hash, featureset_id=featureset_id), limit=1)
        if not known:
            raise EntryNotFound(f"no entry for prompt_hash {prompt_hash}: its sample is unknown, so nothing to extract")
        request = ExtractRequest(samples=[known[0].sample], featureset=known[0].featureset, backend=backend.value)
        return self.extract(request).results[0].manifest

    def audit(self, sample: int, backend: str | None = None, seed: int | None = None) -> AuditReport:
        """Re-extract `sample` stored versions (one sequence per forward, the reference policy) and record whether
        each reproduces its content hash bit for bit."""
        models = self.require_models()
        self.require_window()
        spec = models.spec
        available = set(spec.available_backends())
        stored = self.catalog.find(EntryFilter(model_revision=spec.revision, backend=backend), limit=1_000_000)
        runnable = [m for m in stored if m.backend in available]
        chosen = random.Random(seed).sample(runnable, min(sample, len(runnable)))
        results = []
        for manifest in chosen:
            encoded = spec.encode(parse_sample(manifest.sample), self.max_sample_tokens)
            if manifest.completion_source == "greedy:sglang":  # SGLang is not ours to re-ask: reuse its tokens
                no_layers = Selection(layer_positions=())  # the tokens only
                stored_ids = self.store.get_slice(manifest.content_hash, no_layers)["input_ids"].numpy()
                completion = stored_ids[manifest.prompt_tokens :].tolist()
                encoded = replace(
                    encoded,
                    completion_ids=completion,
                    completion_source=manifest.completion_source,
                    greedy_max_new_tokens=None,
                )
            again = models.extractor().extract(
                encoded,
                manifest.featureset,
                Backend(manifest.backend),
                f"audit of {manifest.prompt_hash[:16]}",
            )
            reproduced_hash = content_hash(again.tensors)
            ok = reproduced_hash == manifest.content_hash
            record = AuditRecord(
                status="reproduced" if ok else "mismatch",
                audited_at=now(),
                reproduced_hash=reproduced_hash,
                fingerprint=again.fingerprint,
            )
            self.catalog.set_audit(manifest.key, manifest.content_hash, record)
            results.append(
                AuditResult(
                    prompt_hash=manifest.prompt_hash,
                    backend=manifest.backend,
                    featureset_id=manifest.featureset_id,
                    content_hash=manifest.content_hash,
                    reproduced=ok,
                    reproduced_hash=reproduced_hash,
                )
            )
        reproduced = sum(r.reproduced for r in results)
        unrunnable = len(stored) - len(runnable)
        return AuditReport(
            total=len(results),
            reproduced=reproduced,
            mismatched=len(results) - reproduced,
            skipped=unrunnable,
            skipped_reason=f"{unrunnable} stored versions need a backend this host lacks" if unrunnable else None,
            results=results,
        )

    def entries(self, where: EntryFilter, limit: int, cursor: str | None) -> EntriesPage:
        after = int(cursor) if cursor and cursor.isdigit() and len(cursor) <= 18 else None
        if cursor and after is None:  # catalogs count in signed 64-bit: 18 digits always fit
            raise InvalidRequest(f"cursor {cursor[:40]!r} is not one this service handed out")
        found = self.catalog.find(where, limit=limit + 1, after_seq=after or 0)
        page = found[:limit]
        next_cursor = str(page[-1].seq) if len(found) > limit and page else None
        return EntriesPage(entries=page, next_cursor=next_cursor)


def _served_layers(manifest: Manifest, selection: Selection) -> list[LayerId]:
    stored = list(manifest.featureset.layers)
    positions = selection.layer_positions
    return stored if positions is None else [stored[p] for p in positions]


def _describe(where: EntryFilter) -> str:
    parts = [
        f"{k}={v}"
        for k, v in (
            ("model_revision", where.model_revision),
            ("backend", where.backend),
            ("featureset", where.featureset_id),
            ("content_hash", where.content_hash),
        )
        if v
    ]
    return ", ".join(parts) or "no filter"


def _describe_keys(manifests: list[Manifest]) -> str:
    keys = sorted({(m.backend, m.model_revision[:19], m.featureset_id) for m in manifests})
    return "; ".join(f"backend={b} model_revision={r}… featureset={f}" for b, r, f in keys)
