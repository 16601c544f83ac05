from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from schemas.api import JobList, JobRequest, JobStatus
from schemas.featureset import FeatureSet, parse_layer
from service.api.deps import JobsDep, ReadScope, Scope, SettingsDep, WriteScope
from service.errors import InvalidRequest

router = APIRouter(tags=["jobs"])
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain")


def _jsonl_samples(body: bytes) -> list[object]:
    samples = []
    for number, line in enumerate(body.decode("utf-8", errors="strict").splitlines(), 1):
        if line.strip():
            try:
                samples.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidRequest(f"line {number} of the upload is not JSON: {exc.msg}") from None
    return samples


@router.post("/v1/jobs", dependencies=[WriteScope], status_code=201)
async def submit(
    request: Request,
    jobs: JobsDep,
    settings: SettingsDep,
    backend: Annotated[list[str] | None, Query(description="with a JSONL upload: backends (repeat)")] = None,
    layers: Annotated[str | None, Query(description="with a JSONL upload: comma-separated layer ids")] = None,
    completion: Annotated[str | None, Query(description="with a JSONL upload: 'greedy:N'")] = None,
    priority: Annotated[int, Query()] = 0,
    run_now: Annotated[bool, Query()] = False,
) -> JobStatus:
    """A JSON JobRequest body, or a JSONL upload (one DESIGN.md sample per line) with the options as query params."""
    body = await request.body()
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    try:
        if content_type in JSONL_TYPES:
            featureset = FeatureSet(layers=[parse_layer(t) for t in layers.split(",")]) if layers else None
            job = JobRequest(
                samples=_jsonl_samples(body),
                backends=backend or ["auto"],
                featureset=featureset,
                completion=completion,
                priority=priority,
                run_now=run_now,
            )
        else:
            job = JobRequest.model_validate_json(body)
    except UnicodeDecodeError:
        raise InvalidRequest("the upload is not UTF-8 text") from None
    except (ValidationError, ValueError) as exc:
        raise InvalidRequest(str(exc).replace("\n", "; ")[:2000]) from None
    if job.run_now:
        Scope("admin")(request, settings)
    return await run_in_threadpool(jobs.submit, job)  # tokenising every sample is work: keep the loop free


@router.get("/v1/jobs", dependencies=[ReadScope])
def list_jobs(jobs: JobsDep) -> JobList:
    return jobs.list()


@router.get("/v1/jobs/{job_id}", dependencies=[ReadScope])
def job_status(job_id: str, jobs: JobsDep) -> JobStatus:
    return jobs.status(job_id)


@router.delete("/v1/jobs/{job_id}", dependencies=[WriteScope])
def cancel_job(job_id: str, jobs: JobsDep) -> JobStatus:
    return jobs.cancel(job_id)
