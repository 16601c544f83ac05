"""How the CLI prints what it lists: fixed columns within 80 characters, ids shortened to unique prefixes that every
command takes back (as git prints commits), and `--json` for scripts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import typer

from schemas.job_api import JobStatus, WindowState
from schemas.manifest import Manifest
from schemas.states import JobState

SHORT = 10  # hex digits of a shortened id: unique in practice, lengthened where two printed ids would collide


def short_ids(values: Iterable[str], prefix: str = "") -> dict[str, str]:
    """Each value shortened to the fewest digits (at least SHORT) that tell it from every other value printed."""
    bare = {value: value.removeprefix(prefix) for value in values}
    distinct = sorted(set(bare.values()))
    width = SHORT
    while width < max((len(v) for v in distinct), default=0) and len({v[:width] for v in distinct}) < len(distinct):
        width += 1
    return {value: short[:width] for value, short in bare.items()}


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> None:
    """Plain columns, two spaces apart; `right` holds the indices of right-aligned (numeric) columns."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        typer.echo("  ".join(cells).rstrip())


def moment(stamp: str | None) -> str:
    """`2026-11-30T15:05:32.101557Z` as `2026-11-30 15:05`."""
    return stamp[:16].replace("T", " ") if stamp else "-"


def print_entries(entries: list[Manifest]) -> None:
    prompts = short_ids(m.prompt_hash for m in entries)
    contents = short_ids((m.content_hash for m in entries), prefix="sha256:")
    rows = [
        (
            prompts[m.prompt_hash],
            str(m.num_tokens),
            m.backend,
            m.featureset_id,
            contents[m.content_hash],
            moment(m.created_at) + ("  CORRUPT" if m.corrupt else "") + ("  FLAGGED" if m.content_flags else ""),
        )
        for m in entries
    ]
    table(("PROMPT", "TOKENS", "BACKEND", "FEATURESET", "CONTENT", "CREATED"), rows, right=frozenset({1}))


def job_state(job: JobStatus) -> str:
    return "waiting" if job.waiting_for_window and job.state == JobState.QUEUED else job.state.value


def print_jobs(jobs: list[JobStatus]) -> None:
    ids = short_ids(job.id for job in jobs)
    rows = [
        (ids[j.id], job_state(j), f"{j.done}/{j.total}", str(j.failed), f"{j.tokens:,}", moment(j.created_at))
        for j in jobs
    ]
    table(("JOB", "STATE", "DONE/TOTAL", "FAILED", "TOKENS", "CREATED"), rows, right=frozenset({2, 3, 4}))


def print_job(job: JobStatus) -> None:
    took = f" in {job.elapsed_s:,.1f} s" if job.elapsed_s is not None else ""
    rate = f", {job.tokens_per_s:,.0f} tok/s" if job.tokens_per_s else ""
    typer.echo(f"job {job.id}: {job_state(job)}")
    counts = f"{job.done} done, {job.failed} failed, {job.pending} pending of {job.total}"
    typer.echo(f"  {counts}; {job.tokens:,} tokens{took}{rate}")
    typer.echo(f"  backends {', '.join(job.backends)}; featureset {job.featureset_id}; priority {job.priority}")
    typer.echo(f"  completion {job.completion or 'as the samples give it'}; created {moment(job.created_at)}")
    if job.error:
        typer.echo(f"  failed: {job.error}")
    for error in job.errors[:20]:
        typer.echo(f"  sample {error.index} ({error.backend}): {error.message}")


def window_line(state: WindowState) -> str:
    schedule = "; ".join(state.schedule) or "none"
    if state.source == "always":
        return "window always open: no schedule and no hand-over, so the GPU is always this service's"
    gpu = {True: "; model loaded (GPU held)", False: "; GPU with SGLang", None: ""}[state.gpu_held]
    gpu += {
        "mismatch": "; SGLANG CAME BACK WRONG after the last window (other greedy tokens for its canary)",
        "restarted": "; SGLang came back wrong after the last window and was restarted (its canary agrees again)",
        "unchecked": "; SGLang's canary could not be asked before the last window",
    }.get(state.sglang_canary or "", "")
    if state.open:
        until = f" until {state.closes_at}" if state.closes_at else ""
        return f"window OPEN ({state.source}{until}){gpu}; schedule: {schedule}"
    upcoming = f"; next opens {state.next_opens_at}" if state.next_opens_at else ""
    return f"window closed{upcoming}{gpu}; schedule: {schedule}"
