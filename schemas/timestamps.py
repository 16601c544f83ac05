"""Timestamps as hsstore writes them: UTC, ISO-8601 with a `Z` (manifests and jobs to the microsecond, so they sort
as text; windows to the second)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> str:
    """Now, e.g. `2026-11-30T15:05:32.101557Z`."""
    return stamp(datetime.now(UTC))


def stamp(moment: datetime) -> str:
    """An aware or UTC-naive time, in the catalog's sortable form."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def stamp_seconds(moment: datetime) -> str:
    """To the second, for times people read (window openings and closings)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str) -> datetime:
    """ISO-8601 (a `Z` or an offset; no zone means UTC); ValueError or OverflowError if it is not one."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
