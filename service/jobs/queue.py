"""Submitting, reading and cancelling warm jobs. Every sample is prepared (validated and tokenised) once, at
submission, so a bad one is refused with a 4xx naming it and the job is never created; the job and all its items land
in one transaction. A job of 10^6 samples is read as it is prepared, spooled to disk and inserted, in bounded memory;
its counts are kept current, so a status poll reads one row."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from schemas.featureset import FeatureSet
from schemas.job_api import (
    MAX_JOB_SAMPLES,
    JobError,
    JobList,
    JobOptions,
    JobRequest,
    JobStatus,
    WorkerLease,
    WorkerList,
    greedy_tokens,
)
from schemas.keys import MIN_PREFIX
from schemas.states import ItemState, JobState
from schemas.timestamps import parse as parse_time
from schemas.timestamps import utc_now
from service.catalog.jobs.records import JobRecord
from service.catalog.protocol import JobStore
from service.core.gpu_time.gate import configured
from service.core.gpu_time.windows import Windows
from service.core.write.prepare import RequestPreparer
from service.errors import AmbiguousEntry, JobNotFound, TooLarge
from service.jobs.item_spool import ItemSpool
from service.model.loader import ModelSpec


class JobQueue:
    def __init__(self, jobs: JobStore, spec: ModelSpec | None, windows: Windows, preparer: RequestPreparer) -> None:
        self.jobs = jobs
        self.spec = spec  # None on a replica without a model: submissions are refused
        self.windows = windows
        self.preparer = preparer

    def submit(self, request: JobRequest) -> JobStatus:
        return self.submit_samples(request, request.samples)

    def submit_samples(self, options: JobOptions, samples: Iterable[Any]) -> JobStatus:
        """A job of `samples` (a JSONL upload is read as it is parsed, never held as a list). Each sample is
        prepared once, a batch at a time (validated and tokenised against the model: a bad one is refused naming
        it, and no job is made) and spooled to disk; then the job and its items land in one transaction."""
        spec = configured(self.spec)
        greedy = greedy_tokens(options.completion) if options.completion else None
        featureset, backends = self.preparer.targets(spec, options.featureset, options.backends)
        with ItemSpool() as spool:
            for index, prepared in enumerate(self.preparer.each(spec, samples, greedy)):
                if index >= MAX_JOB_SAMPLES:
                    raise TooLarge(f"a job holds at most {MAX_JOB_SAMPLES:,} samples; split this one")
                completion = prepared.parsed.sample.completion
                wants_greedy = completion.greedy.max_new_tokens if completion and completion.greedy else None
                spool.add(index, prepared.sample, prepared.parsed.prompt_hash, wants_greedy)
            job = self._record(options, featureset, [b.value for b in backends])
            self.jobs.create_job(job, spool.items(job.backends))
        return self.status(job.id)

    @staticmethod
    def _record(options: JobOptions, featureset: FeatureSet, backends: list[str]) -> JobRecord:
        return JobRecord(
            id=uuid.uuid4().hex,
            state=JobState.QUEUED,
            priority=options.priority,
            run_now=options.run_now,
            backends=backends,
            featureset=featureset.canonical(),
            completion=options.completion,
            created_at=utc_now(),
            started_at=None,
            finished_at=None,
            tokens=0,
            busy_s=0.0,
        )

    def _job(self, job_id: str) -> JobRecord:
        """The job with this id, or with this unique prefix of an id (as listings print them)."""
        job = self.jobs.get_job(job_id)
        if job is None and len(job_id) >= MIN_PREFIX:
            matches = self.jobs.job_ids_starting(job_id, limit=2)
            if len(matches) > 1:
                raise AmbiguousEntry(f"job id prefix {job_id!r} matches several jobs; give more of the id")
            job = self.jobs.get_job(matches[0]) if matches else None
        if job is None:
            raise JobNotFound(f"no job {job_id[:64]!r}")
        return job

    def status(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        counts = self.jobs.job_counts(job.id)
        done, failed, pending = (
            counts.get(state, 0) for state in (ItemState.DONE, ItemState.FAILED, ItemState.PENDING)
        )
        window_open = self.windows.state().open
        elapsed = _elapsed_s(job)
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
            existing=job.existing,
            failed=failed,
            pending=pending,
            completions_fetched=counts["completions_fetched"],
            tokens=job.tokens,
            elapsed_s=elapsed,
            tokens_per_s=job.tokens / elapsed if elapsed else None,
            tokens_per_worker_s=job.tokens / job.busy_s if job.busy_s > 0 else None,
            waiting_for_window=pending > 0 and not job.run_now and not window_open and job.state.active,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            error=job.error,
            errors=[
                JobError(index=i, backend=b, prompt_hash=p, message=m or "")
                for i, b, p, m in self.jobs.job_errors(job.id)
            ],
        )

    def list(self) -> JobList:
        return JobList(jobs=[self.status(job.id) for job in self.jobs.list_jobs()])

    def workers(self) -> WorkerList:
        return WorkerList(workers=[WorkerLease(**lease._asdict()) for lease in self.jobs.live_leases()])

    def cancel(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        if job.state.active:
            self.jobs.set_job_state(job.id, JobState.CANCELLED, finished_at=utc_now())
        return self.status(job.id)


def _elapsed_s(job: JobRecord) -> float | None:
    """Wall time from the job's start to its end (or now): the cluster's time, however many workers ran it."""
    if job.started_at is None:
        return None
    end = parse_time(job.finished_at) if job.finished_at else datetime.now(UTC)
    return max((end - parse_time(job.started_at)).total_seconds(), 0.0)
