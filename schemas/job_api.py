"""Request and response bodies of the HTTP API's warm jobs, workers and windows (v1), shared by the service and the
client."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.api import RawSample
from schemas.backend import BackendChoice
from schemas.featureset import FeatureSet
from schemas.states import JobState
from schemas.validation import JsonBool, JsonInt

# 'greedy:N' with 1 <= N <= 65536, as greedy_tokens takes it
GREEDY_PATTERN = r"^greedy:0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])$"


MAX_JOB_SAMPLES = 1_000_000


class JobOptions(BaseModel):
    """What a warm job runs its samples with: one or several backends, featureset, completion policy, priority (a
    JSONL upload's query parameters)."""

    model_config = ConfigDict(extra="forbid")

    backends: list[BackendChoice] = Field(default_factory=lambda: ["auto"], min_length=1, max_length=3)
    featureset: FeatureSet | None = None
    completion: str | None = Field(
        default=None,
        description="'greedy:N': a greedy completion of N tokens for "
        "samples that have none (fetched from SGLang before the window)",
        json_schema_extra={"pattern": GREEDY_PATTERN},
    )
    priority: JsonInt = Field(default=0, ge=-1000, le=1000)
    run_now: JsonBool = Field(default=False, description="run outside any window (admin scope)")

    @field_validator("completion")
    @classmethod
    def _completion(cls, value: str | None) -> str | None:
        if value is not None:
            greedy_tokens(value)
        return value


class JobRequest(JobOptions):
    """A warm job: its samples (or, as `application/x-ndjson`, a JSONL upload with the options as queries)."""

    samples: list[RawSample] = Field(min_length=1, max_length=MAX_JOB_SAMPLES)


def greedy_tokens(policy: str) -> int:
    kind, _, tokens = policy.partition(":")
    if kind != "greedy" or not (tokens.isascii() and tokens.isdigit()) or not 1 <= int(tokens) <= 65536:
        raise ValueError(f"completion policy {policy!r} is not 'greedy:N' with 1 <= N <= 65536")
    return int(tokens)


class JobError(BaseModel):
    index: int
    backend: str
    prompt_hash: str
    message: str


class JobStatus(BaseModel):
    id: str
    state: JobState
    priority: int
    run_now: bool
    backends: list[str]
    featureset_id: str
    completion: str | None
    total: int
    done: int  # stored: extracted by the job, or found already stored (`existing` of them)
    existing: int = 0
    failed: int
    pending: int
    completions_fetched: int
    tokens: int  # held by the entries the job stored (a killed worker's written but unrecorded ones included)
    elapsed_s: float | None = None  # from its start to its end, or now
    tokens_per_s: float | None  # the cluster's rate: tokens over elapsed_s, however many workers ran it
    tokens_per_worker_s: float | None = None  # tokens over the seconds workers spent on it, summed
    waiting_for_window: bool = False
    created_at: str
    started_at: str | None
    finished_at: str | None
    error: str | None = None  # why the job failed, when the host (not a sample) was at fault
    errors: list[JobError]


class JobList(BaseModel):
    jobs: list[JobStatus]


class WorkerLease(BaseModel):
    """What one worker holds of one job under a live lease."""

    worker: str  # its lease name (HSSTORE_WORKER_NAME, default host:device)
    job_id: str
    items: int
    expires_in_s: float  # until its latest lease runs out, unless its heartbeat renews it


class WorkerList(BaseModel):
    workers: list[WorkerLease]


class WindowOpenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    minutes: float = Field(gt=0, le=24 * 60, description="how long SGLang lends the GPU")


class WindowState(BaseModel):
    open: bool
    source: Literal["always", "schedule", "manual"] | None  # why it is open; "always": no schedule, no hand-over
    closes_at: str | None
    schedule: list[str]
    next_opens_at: str | None = None  # the next scheduled opening, while shut
    gpu_held: bool | None = None  # the model is loaded now (with a hand-over: SGLang has given the GPU up)
    # SGLang's greedy canary after the last window: ok, mismatch (reported), restarted (and then ok), unchecked
    sglang_canary: Literal["ok", "mismatch", "restarted", "unchecked"] | None = None
