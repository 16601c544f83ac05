"""Downtime windows: when SGLang gives the GPU up. A schedule from the settings ("Mon-Fri 02:00-03:30 UTC", several
allowed) plus manual overrides kept in the catalog (so they survive a restart): `open` for N minutes, `close` now.
When no schedule is configured and no hand-over is, the GPU is ours and the window is always open."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Protocol

from schemas.job_api import WindowState
from schemas.timestamps import parse, stamp, stamp_seconds

_DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_SPEC = re.compile(r"^\s*(?P<days>[A-Za-z,\-]+)\s+(?P<start>\d{1,2}:\d{2})-(?P<end>\d{1,2}:\d{2})\s*(?:UTC)?\s*$")
MANUAL_UNTIL = "window.manual_until"
CLOSED_UNTIL = "window.closed_until"


class KeyValue(Protocol):
    def kv_get(self, name: str) -> str | None: ...

    def kv_set(self, name: str, value: str | None) -> None: ...


def _parse_days(text: str) -> frozenset[int]:
    text = text.lower()
    if text in ("daily", "every", "*"):
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            first, last = (_DAYS.index(p[:3]) for p in part.split("-"))
            span = range(first, last + 1) if first <= last else [*range(first, 7), *range(0, last + 1)]
            days.update(span)
        else:
            days.add(_DAYS.index(part[:3]))
    return frozenset(days)


@dataclass(frozen=True, slots=True)
class ScheduledWindow:
    days: frozenset[int]  # weekday the window starts on, Monday = 0
    start: time
    end: time  # before `start`: the window runs past midnight

    @classmethod
    def parse(cls, spec: str) -> ScheduledWindow:
        match = _SPEC.match(spec)
        if not match:
            raise ValueError(f"window {spec!r} is not like 'Mon-Fri 02:00-03:30 UTC'")
        try:
            days = _parse_days(match["days"])
            start, end = (time.fromisoformat(match[k].zfill(5)) for k in ("start", "end"))
        except ValueError:
            raise ValueError(f"window {spec!r} names an unknown day or time") from None
        if start == end:
            raise ValueError(f"window {spec!r} is empty")
        return cls(days, start, end)

    def containing(self, now: datetime) -> tuple[datetime, datetime] | None:
        """(opened, closes) of the occurrence that contains `now`, if any."""
        for back in (0, 1):
            day = (now - timedelta(days=back)).date()
            if day.weekday() not in self.days:
                continue
            opened = datetime.combine(day, self.start, UTC)
            closes = datetime.combine(day, self.end, UTC)
            if closes <= opened:
                closes += timedelta(days=1)
            if opened <= now < closes:
                return opened, closes
        return None

    def next_opening(self, after: datetime) -> datetime:
        """The first opening strictly after `after` (within the coming week, as every window recurs weekly)."""
        for ahead in range(8):
            day = (after + timedelta(days=ahead)).date()
            opened = datetime.combine(day, self.start, UTC)
            if day.weekday() in self.days and opened > after:
                return opened
        raise AssertionError("a weekly window opens within eight days")  # days is never empty


def _iso(moment: datetime | None) -> str | None:
    return stamp_seconds(moment) if moment else None


def seconds_left(state: WindowState, now: datetime) -> float | None:
    """How long `state`'s open window has left at `now`; None while shut or with no end."""
    if not state.open or state.closes_at is None:
        return None
    return (parse(state.closes_at) - now).total_seconds()


class Windows:
    def __init__(self, schedule: list[str], store: KeyValue, enforced: bool, margin_s: float = 0.0) -> None:
        self.specs = list(schedule)
        self.schedule = [ScheduledWindow.parse(s) for s in schedule]
        self.store = store
        self.enforced = enforced
        self.margin_s = margin_s  # the time needed to finish a batch, unload and hand the GPU back

    def _stamp(self, name: str) -> datetime | None:
        value = self.store.kv_get(name)
        return parse(value) if value else None

    def state(self, now: datetime | None = None) -> WindowState:
        now = now or datetime.now(UTC)
        if not self.enforced:
            return WindowState(open=True, source="always", closes_at=None, schedule=self.specs)
        manual = self._stamp(MANUAL_UNTIL)
        if manual and now < manual:
            return WindowState(open=True, source="manual", closes_at=_iso(manual), schedule=self.specs)
        closed_until = self._stamp(CLOSED_UNTIL)
        for window in self.schedule:
            span = window.containing(now)
            if span and not (closed_until and now < closed_until):
                return WindowState(open=True, source="schedule", closes_at=_iso(span[1]), schedule=self.specs)
        # a schedule closed early stays shut until its end: the next opening counts from then
        after = max(now, closed_until) if closed_until else now
        upcoming = min((w.next_opening(after) for w in self.schedule), default=None)
        return WindowState(open=False, source=None, closes_at=None, schedule=self.specs, next_opens_at=_iso(upcoming))

    def seconds_left(self, now: datetime | None = None) -> float | None:
        now = now or datetime.now(UTC)
        return seconds_left(self.state(now), now)

    def usable(self, now: datetime | None = None) -> bool:
        """Open, and not about to close: new batches start only while there is time to hand the GPU back."""
        now = now or datetime.now(UTC)
        state = self.state(now)  # read once: its manual stamps are the catalog's
        if not state.open:
            return False
        left = seconds_left(state, now)
        return left is None or left > self.margin_s

    def open(self, minutes: float, now: datetime | None = None) -> WindowState:
        if minutes * 60 <= self.margin_s:
            raise ValueError(
                f"a {minutes:g}-minute window is no longer than the {self.margin_s:g} s margin kept to "
                "hand the GPU back, so nothing could run in it (see window_margin_s)"
            )
        now = now or datetime.now(UTC)
        self.store.kv_set(MANUAL_UNTIL, stamp(now + timedelta(minutes=minutes)))
        self.store.kv_set(CLOSED_UNTIL, None)
        return self.state(now)

    def close(self, now: datetime | None = None) -> WindowState:
        """End a manual window now; a scheduled one that is open stays shut until its end."""
        now = now or datetime.now(UTC)
        self.store.kv_set(MANUAL_UNTIL, None)
        ends = [span[1] for w in self.schedule if (span := w.containing(now))]
        self.store.kv_set(CLOSED_UNTIL, stamp(max(ends)) if ends else None)
        return self.state(now)
