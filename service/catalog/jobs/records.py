"""Warm jobs as the job store keeps them: a job and one item per (sample, backend), so a restart resumes exactly
where the last process stopped: items not marked done are redone, and extraction skips what is already stored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from schemas.states import ItemState, JobState


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    state: JobState
    priority: int
    run_now: bool
    backends: list[str]
    featureset: dict[str, Any]
    completion: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    tokens: int
    busy_s: float
    error: str | None = None
    existing: int = 0  # items that found their entry already stored


@dataclass(frozen=True, slots=True)
class JobItem:
    job_id: str
    index: int
    backend: str
    sample: dict[str, Any]
    prompt_hash: str
    state: ItemState
    completion_ids: list[int] | None
    completion_source: str | None


class LeaseRecord(NamedTuple):
    """What one worker holds of one job: how many items, and how long until its latest lease runs out."""

    worker: str
    job_id: str
    items: int
    expires_in_s: float


@dataclass(frozen=True, slots=True)
class NewItem:
    """An item as a job is created: which sample, for which backend, and the greedy completion it asks for."""

    index: int
    backend: str
    sample: dict[str, Any]
    prompt_hash: str
    greedy_tokens: int | None


def job_from_row(row: tuple) -> JobRecord:
    id_, state, priority, run_now, backends, featureset, completion, *rest = row
    return JobRecord(
        id_, JobState(state), priority, bool(run_now), json.loads(backends), json.loads(featureset), completion, *rest
    )


def item_from_row(row: tuple) -> JobItem:
    job_id, index, backend, sample, prompt_hash, state, completion_ids, completion_source = row
    return JobItem(
        job_id,
        index,
        backend,
        json.loads(sample),
        prompt_hash,
        ItemState(state),
        json.loads(completion_ids) if completion_ids else None,
        completion_source,
    )
