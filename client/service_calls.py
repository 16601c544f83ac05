"""The service's calls that are not feature bodies: whether a version exists, listings, comparisons, audits,
extraction, estimates, imports, warm jobs, workers and windows. `FeatureClient` has them; each is one request over
its transport."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Unpack

from client.keys import featureset_of, key_of_parts, part_of_parts, samples_to_send
from client.transport import Transport
from schemas import safetensors_body
from schemas.api import (
    IMPORT_METADATA,
    EntriesPage,
    ExtractRequest,
    ExtractResponse,
    ImportRequest,
    ImportResult,
    Info,
    KeysPage,
    ListedKey,
)
from schemas.checks_api import AuditReport, AuditRequest, CompareReport, StoreHealth
from schemas.estimates import EstimateReport, EstimateRequest
from schemas.featureset import FeatureSet, LayerId
from schemas.http import BODY_FORMATS, BodyFormat
from schemas.job_api import JobList, JobRequest, JobStatus, WindowOpenRequest, WindowState, WorkerLease, WorkerList
from schemas.keys import EntryFilter, EntryFilters, KeyParts
from schemas.manifest import Manifest
from schemas.states import Existing
from schemas.tensors import RawTensor


class ServiceCalls:
    _transport: Transport

    def exists(self, prompt: Mapping[str, Any] | None = None, **key: Unpack[KeyParts]) -> bool:
        """Whether a version with this key is stored (a HEAD: no body is read); a featureset object, as `get` names
        it, is there when a stored featureset holds it."""
        item = part_of_parts(prompt, **key)
        return self._transport.exists(f"/v1/features/{item.prompt_hash}", item.read_params())

    # -- listing, comparing, auditing ----------------------------------------------------------------------------
    def entries(self, *, page_size: int = 100, **filters: Unpack[EntryFilters]) -> Iterator[Manifest]:
        """Every matching version, oldest first, page by page. Filters as `entries_page` takes them."""
        cursor = None
        while True:
            page = self.entries_page(limit=page_size, cursor=cursor, **filters)
            yield from page.entries
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def keys(self, *, page_size: int = 10_000, **filters: Unpack[EntryFilters]) -> Iterator[ListedKey]:
        """Every matching version's key (pinned by content hash), tokens and creation time, oldest first, without
        their manifests: ~200 bytes a version, for listings of millions. `ListedKey.key()` reads it."""
        cursor = None
        while True:
            page = self._transport.call(
                KeysPage, "GET", "/v1/entries:keys", params=self._listing(page_size, cursor, **filters)
            )
            yield from page.keys
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def entries_page(
        self,
        *,
        prompt_hash: str | None = None,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        content_hash: str | None = None,
        since: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> EntriesPage:
        """One page of the listing (`prompt_hash` and `content_hash` may be prefixes); pass its `next_cursor` back
        for the next."""
        filters = {"prompt_hash": prompt_hash, "model_revision": model_revision, "backend": backend}
        params = self._listing(limit, cursor, featureset=featureset, content_hash=content_hash, since=since, **filters)
        return self._transport.call(EntriesPage, "GET", "/v1/entries", params=params)

    @staticmethod
    def _listing(limit: int, cursor: str | None, **filters: Any) -> dict[str, Any]:
        """A listing's query: its filters, as both listings take them, the page size and the cursor."""
        featureset = filters.pop("featureset", None)
        where = EntryFilter(
            featureset_id=featureset.id if isinstance(featureset, FeatureSet) else featureset, **filters
        )
        return {**where.params(), "limit": limit} | ({"cursor": cursor} if cursor is not None else {})

    def compare(
        self,
        prompt: Mapping[str, Any] | None = None,
        *,
        prompt_hash: str | None = None,
        a: str = "fla",
        b: str = "torch",
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        extract: bool = False,
    ) -> CompareReport:
        """Per-layer agreement of two backends' features for one prompt; `extract` fills in a missing side."""
        exact = featureset.id if isinstance(featureset, FeatureSet) else featureset  # both sides of one featureset
        key = key_of_parts(prompt, prompt_hash=prompt_hash, model_revision=model_revision, featureset=exact)
        params = {**key.params(), "a": a, "b": b, "extract": extract}
        return self._transport.call(CompareReport, "GET", f"/v1/compare/{key.prompt_hash}", params=params)

    def audit(
        self, sample: int, backend: str | None = None, seed: int | None = None, imports: bool = False
    ) -> AuditReport:
        """Re-extract `sample` stored entries and report which reproduce their content hash bit for bit; `imports`:
        spot-check imported entries never checked against the model (or suspect) instead."""
        body = AuditRequest(sample=sample, backend=backend, seed=seed, imports=imports).model_dump(mode="json")
        return self._transport.call(AuditReport, "POST", "/v1/audit", json=body)

    # -- extracting, warm jobs and windows -----------------------------------------------------------------------
    def info(self) -> Info:
        return self._transport.call(Info, "GET", "/v1/info")

    def health(self, limit: int = 150, cursor: str | None = None) -> StoreHealth:
        """What the store holds per model revision, backend and featureset (kept current by the service) and the
        first `limit` versions that need an operator's eye; pass `next_cursor` back for more."""
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        return self._transport.call(StoreHealth, "GET", "/v1/health", params=params)

    def extract(
        self,
        samples: Sequence[Mapping[str, Any]],
        featureset: FeatureSet | Sequence[LayerId] | None = None,
        backend: str | None = None,
        force: bool = False,
        existing: Existing | str = Existing.SAME,
    ) -> ExtractResponse:
        """Extract what is not stored, and return what is. `existing="holding"`: an entry of a featureset holding
        this one (a union of recipes' layers) counts as stored and is returned instead (warm jobs always count
        so); by default only this featureset's own entry does."""
        chosen = {"backend": backend} if backend is not None else {}
        request = ExtractRequest(
            samples=samples_to_send(samples),
            featureset=featureset_of(featureset),
            force=force,
            existing=Existing(existing),
            **chosen,
        )
        body = request.model_dump(mode="json", exclude_none=True)
        return self._transport.call(ExtractResponse, "POST", "/v1/extract", json=body)

    def estimate(
        self,
        samples: Sequence[Mapping[str, Any]],
        featureset: FeatureSet | Sequence[LayerId] | None = None,
        backends: Sequence[str] = ("auto",),
        tokens_per_s: float | None = None,
        recipes: Sequence[FeatureSet | Sequence[LayerId]] | None = None,
    ) -> EstimateReport:
        """Tokens, bytes (compressed as this store measured) and GPU-hours these samples would take; runs nothing.
        `recipes` instead of a featureset: the report is for their union, extracted once, and `report.recipes`
        says what each would take on its own."""
        request = EstimateRequest(
            samples=samples_to_send(samples),
            featureset=featureset_of(featureset),
            recipes=[featureset_of(r) for r in recipes] if recipes is not None else None,
            backends=list(backends),
            tokens_per_s=tokens_per_s,
        )
        return self._transport.call(
            EstimateReport, "POST", "/v1/estimate", json=request.model_dump(mode="json", exclude_none=True)
        )

    def import_entry(self, request: ImportRequest, tensors: Sequence[RawTensor]) -> ImportResult:
        """Store features computed elsewhere (hsstore's layout: hidden_states bf16 [T, L, H], input_ids int32 [T],
        loss_mask uint8 [T] optional), under `request.content_hash`, which the service checks against the bytes.
        `hsstore import` reads SpecForge and speculators files into this (`client.exchange`)."""
        body = b"".join(safetensors_body.encode_parts(tensors, {IMPORT_METADATA: request.model_dump_json()}))
        headers = {"content-type": BODY_FORMATS[BodyFormat.SAFETENSORS].media_type}
        return self._transport.call(ImportResult, "POST", "/v1/entries:import", content=body, headers=headers)

    def submit_job(
        self,
        samples: Sequence[Mapping[str, Any]] | None = None,
        *,
        jsonl: bytes | None = None,
        backends: Sequence[str] = ("auto",),
        featureset: FeatureSet | Sequence[LayerId] | None = None,
        completion: str | None = None,
        priority: int = 0,
        run_now: bool = False,
    ) -> JobStatus:
        """A warm job from samples, or from a JSONL upload as it is on disk (one sample per line). `featureset`: a
        layer list or a whole FeatureSet (dtype, target_ids, top_k), as `extract` and `estimate` take it."""
        if (samples is None) == (jsonl is None):
            raise ValueError("give samples or jsonl")
        featureset = featureset_of(featureset)
        if jsonl is not None:
            params: dict[str, Any] = {"backend": list(backends), "priority": priority, "run_now": run_now}
            if featureset is not None:
                params.update(featureset.params())
            if completion is not None:
                params["completion"] = completion
            headers = {"content-type": "application/x-ndjson"}
            response = self._transport.request("POST", "/v1/jobs", content=jsonl, params=params, headers=headers)
        else:
            request = JobRequest(
                samples=samples_to_send(samples or []),
                backends=list(backends),
                featureset=featureset,
                completion=completion,
                priority=priority,
                run_now=run_now,
            )
            body = request.model_dump(mode="json", exclude_none=True)
            response = self._transport.request("POST", "/v1/jobs", json=body)
        return self._transport.parse(JobStatus, response)

    def job(self, job_id: str) -> JobStatus:
        """One job, by its id or a unique prefix of it."""
        return self._transport.call(JobStatus, "GET", f"/v1/jobs/{job_id}")

    def jobs(self) -> list[JobStatus]:
        return self._transport.call(JobList, "GET", "/v1/jobs").jobs

    def workers(self) -> list[WorkerLease]:
        """Live workers and the job items each holds under a lease."""
        return self._transport.call(WorkerList, "GET", "/v1/workers").workers

    def cancel_job(self, job_id: str) -> JobStatus:
        return self._transport.call(JobStatus, "POST", f"/v1/jobs/{job_id}/cancel")

    def window(self) -> WindowState:
        return self._transport.call(WindowState, "GET", "/v1/window")

    def open_window(self, minutes: float) -> WindowState:
        body = WindowOpenRequest(minutes=minutes).model_dump(mode="json")
        return self._transport.call(WindowState, "POST", "/v1/window/open", json=body)

    def close_window(self) -> WindowState:
        return self._transport.call(WindowState, "POST", "/v1/window/close")
