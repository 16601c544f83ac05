"""Submitting, reading and cancelling warm jobs. Every sample is validated (and tokenised) at submission, so a bad
one is refused with a 4xx naming it and the job is never created; the job and all its items land in one transaction.
"""

from __future__ import annotations

import uuid

from schemas.api import JobError, JobList, JobRequest, JobStatus, greedy_tokens
from schemas.backend import AUTO
from schemas.featureset import FeatureSet
from schemas.keys import MIN_PREFIX
from schemas.samples import InvalidSampleError, parse_sample
from service.catalog.jobs import JobRecord
from service.catalog.protocol import Catalog
from service.errors import AmbiguousEntry, InvalidRequest, InvalidSample, JobNotFound
from service.library import FeatureLibrary, now


class JobQueue:
    def __init__(self, library: FeatureLibrary, catalog: Catalog) -> None:
        self.library = library
        self.catalog = catalog

    def submit(self, request: JobRequest) -> JobStatus:
        spec = self.library.require_models().spec
        featureset = request.featureset or FeatureSet.default_for(spec.num_layers)
        try:
            featureset.check_against(spec.num_layers)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        backends = []
        for name in request.backends:  # each must be one this host can run ("auto" is resolved now, once)
            backend = spec.resolve_backend(name if name != AUTO else self.library.default_backend).value
            if backend not in backends:
                backends.append(backend)
        greedy = greedy_tokens(request.completion) if request.completion else None
        items: list[tuple[int, str, dict, str, int | None]] = []
        for index, raw in enumerate(request.samples):
            sample = dict(raw) if isinstance(raw, dict) else raw
            if greedy is not None and isinstance(sample, dict) and "completion" not in sample:
                sample["completion"] = {"greedy": {"max_new_tokens": greedy}}
            try:
                parsed = parse_sample(sample, index)
            except InvalidSampleError as exc:
                raise InvalidSample(str(exc)) from None
            spec.encode(parsed, self.library.max_sample_tokens, index)
            completion = parsed.sample.completion
            wants_greedy = completion.greedy.max_new_tokens if completion and completion.greedy else None
            items.extend((index, b, sample, parsed.prompt_hash, wants_greedy) for b in backends)
        job = JobRecord(
            id=uuid.uuid4().hex,
            state="queued",
            priority=request.priority,
            run_now=request.run_now,
            backends=backends,
            featureset=featureset.canonical(),
            completion=request.completion,
            created_at=now(),
            started_at=None,
            finished_at=None,
            tokens=0,
            busy_s=0.0,
        )
        self.catalog.create_job(job, items)
        return self.status(job.id)

    def _job(self, job_id: str) -> JobRecord:
        """The job with this id, or with this unique prefix of an id (as listings print them)."""
        job = self.catalog.get_job(job_id)
        if job is None and len(job_id) >= MIN_PREFIX:
            matches = self.catalog.job_ids_starting(job_id, limit=2)
            if len(matches) > 1:
                raise AmbiguousEntry(f"job id prefix {job_id!r} matches several jobs; give more of the id")
            job = self.catalog.get_job(matches[0]) if matches else None
        if job is None:
            raise JobNotFound(f"no job {job_id[:64]!r}")
        return job

    def status(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        counts = self.catalog.job_counts(job.id)
        done, failed, pending = counts.get("done", 0), counts.get("failed", 0), counts.get("pending", 0)
        window_open = self.library.windows.state().open if self.library.windows else True
        return JobStatus(
            id=job.id,
            state=job.state,
            priority=job.priority,
            run_now=job.run_now,
            backends=job.backends,
            featureset_id=FeatureSet.model_validate(job.featureset).id,
            completion=job.completion,
            total=done + failed + pending,
            done=done,
            failed=failed,
            pending=pending,
            completions_fetched=counts["completions_fetched"],
            tokens=job.tokens,
            tokens_per_s=job.tokens / job.busy_s if job.busy_s > 0 else None,
            waiting_for_window=pending > 0 and not job.run_now and not window_open and job.state != "cancelled",
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            error=job.error,
            errors=[
                JobError(index=i, backend=b, prompt_hash=p, message=m or "")
                for i, b, p, m in self.catalog.job_errors(job.id)
            ],
        )

    def list(self) -> JobList:
        return JobList(jobs=[self.status(job.id) for job in self.catalog.list_jobs()])

    def cancel(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        if job.state in ("queued", "running"):
            self.catalog.set_job_state(job.id, "cancelled", finished_at=now())
        return self.status(job.id)
