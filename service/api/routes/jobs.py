from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from schemas.featureset import FeatureDtype, FeatureSet
from schemas.job_api import JobList, JobOptions, JobRequest, JobStatus, WorkerList
from schemas.json_limits import load_json
from schemas.jsonl import JsonlError, iter_jsonl
from schemas.validation import describe_errors
from service.api.bounded_json import resource_router
from service.api.deps import JobsDep, ReadScope, Scope, SettingsDep, WriteScope
from service.api.openapi import errors, json_body
from service.errors import InvalidRequest
from service.jobs.queue import JobQueue

router = resource_router("jobs")
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain")


@router.post(
    "/v1/jobs",
    dependencies=[WriteScope],
    status_code=201,
    summary="Submit a warm job (JSON body or a JSONL upload); it runs in the next window",
    responses=errors(401, 403, 409, 413, 422, 503),
    openapi_extra=json_body(
        JobRequest,
        "a JobRequest; or, as application/x-ndjson, one sample per line with the options as query parameters",
    ),
)
async def submit(
    request: Request,
    jobs: JobsDep,
    settings: SettingsDep,
    backend: Annotated[list[str] | None, Query(description="with a JSONL upload: backends (repeat)")] = None,
    layers: Annotated[str | None, Query(description="with a JSONL upload: comma-separated layer ids")] = None,
    dtype: Annotated[FeatureDtype, Query(description="with a JSONL upload and layers: the featureset's dtype")] = (
        "bfloat16"
    ),
    target_ids: Annotated[bool, Query(description="with a JSONL upload and layers: store target_ids")] = False,
    top_k: Annotated[int | None, Query(description="with a JSONL upload and layers: store the top-k")] = None,
    completion: Annotated[str | None, Query(description="with a JSONL upload: 'greedy:N'")] = None,
    priority: Annotated[int, Query()] = 0,
    run_now: Annotated[bool, Query()] = False,
) -> JobStatus:
    """A JSON JobRequest body, or a JSONL upload (a sample per line, docs/design.md) with the options as queries."""
    body = await request.body()
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    try:
        if content_type in JSONL_TYPES:
            featureset = FeatureSet.from_params(layers or None, dtype, target_ids, top_k)
            options = JobOptions(
                backends=backend or ["auto"],
                featureset=featureset,
                completion=completion,
                priority=priority,
                run_now=run_now,
            )
            if options.run_now:
                Scope("admin")(request, settings)
            return await _submit_jsonl(jobs, options, body)
        job = JobRequest.model_validate(load_json(body))  # the one bounded parser every JSON body goes through
    except ValidationError as exc:
        raise InvalidRequest(describe_errors(exc.errors(include_url=False, include_input=False))[:2000]) from None
    except ValueError as exc:  # JsonlError, JSON past a limit or not JSON, a bad layer list or completion policy
        raise InvalidRequest(str(exc)[:2000]) from None
    if job.run_now:
        Scope("admin")(request, settings)
    return await run_in_threadpool(jobs.submit, job)  # tokenising every sample is work: keep the loop free


async def _submit_jsonl(jobs: JobQueue, options: JobOptions, body: bytes) -> JobStatus:
    """Read as it is prepared (once; spooled to disk until the job is inserted): never a list of the upload's 10^6
    samples."""
    try:
        return await run_in_threadpool(jobs.submit_samples, options, iter_jsonl(body, "the upload"))
    except JsonlError as exc:
        raise InvalidRequest(str(exc)[:2000]) from None


@router.get("/v1/jobs", dependencies=[ReadScope], summary="List warm jobs", responses=errors(401, 403))
def list_jobs(jobs: JobsDep) -> JobList:
    return jobs.list()


@router.get(
    "/v1/workers",
    dependencies=[ReadScope],
    summary="Live workers: what each holds of which job, and until when (leases in the catalog)",
    responses=errors(401, 403),
)
def list_workers(jobs: JobsDep) -> WorkerList:
    return jobs.workers()


@router.get(
    "/v1/jobs/{job_id}",
    dependencies=[ReadScope],
    summary="One job's progress (its id or a unique prefix)",
    responses=errors(401, 403, 404, 409),
)
def job_status(job_id: str, jobs: JobsDep) -> JobStatus:
    return jobs.status(job_id)


@router.post(
    "/v1/jobs/{job_id}/cancel",
    dependencies=[WriteScope],
    summary="Cancel a job (its id or a unique prefix): its pending samples are not extracted, its record stays",
    responses=errors(401, 403, 404, 409),
)
def cancel_job(job_id: str, jobs: JobsDep) -> JobStatus:
    return jobs.cancel(job_id)
