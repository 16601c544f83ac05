"""Warm jobs in the catalog: a job row and one item per (sample, backend), so a restart resumes exactly where the
last process stopped: items not marked done are redone, and extraction skips what is already stored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    state: str
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


@dataclass(frozen=True, slots=True)
class JobItem:
    job_id: str
    index: int
    backend: str
    sample: dict[str, Any]
    prompt_hash: str
    state: str  # pending | done | failed
    completion_ids: list[int] | None
    completion_source: str | None


JOBS_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id          TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    priority    INTEGER NOT NULL,
    run_now     INTEGER NOT NULL,
    backends    TEXT NOT NULL,
    featureset  TEXT NOT NULL,
    completion  TEXT,
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    tokens      INTEGER NOT NULL DEFAULT 0,
    busy_s      REAL NOT NULL DEFAULT 0,
    error       TEXT
);
CREATE TABLE IF NOT EXISTS job_items (
    job_id            TEXT NOT NULL,
    idx               INTEGER NOT NULL,
    backend           TEXT NOT NULL,
    sample            TEXT NOT NULL,
    prompt_hash       TEXT NOT NULL,
    state             TEXT NOT NULL,
    error             TEXT,
    content_hash      TEXT,
    greedy_tokens     INTEGER,
    completion_ids    TEXT,
    completion_source TEXT,
    PRIMARY KEY (job_id, idx, backend)
);
CREATE INDEX IF NOT EXISTS job_items_pending ON job_items (job_id, state);
CREATE TABLE IF NOT EXISTS kv (name TEXT PRIMARY KEY, value TEXT);
"""


def job_from_row(row: tuple) -> JobRecord:
    id_, state, priority, run_now, backends, featureset, completion, *rest = row
    return JobRecord(
        id_, state, priority, bool(run_now), json.loads(backends), json.loads(featureset), completion, *rest
    )


def item_from_row(row: tuple) -> JobItem:
    job_id, index, backend, sample, prompt_hash, state, completion_ids, completion_source = row
    return JobItem(
        job_id,
        index,
        backend,
        json.loads(sample),
        prompt_hash,
        state,
        json.loads(completion_ids) if completion_ids else None,
        completion_source,
    )
