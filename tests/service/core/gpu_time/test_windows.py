"""Downtime windows: schedules parsed and refused, a window containing a moment or not (across midnight too), and a
manual open or close overriding the schedule for the rest of the window it falls in. (Jobs waiting for windows and a
window refused for being shorter than the hand-back margin, through a real service: tests/service/jobs/.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.core.gpu_time.windows import ScheduledWindow, Windows


class MemoryKV(dict):
    def kv_get(self, name: str) -> str | None:
        return self.get(name)

    def kv_set(self, name: str, value: str | None) -> None:
        self[name] = value


@pytest.mark.parametrize(
    ("spec", "moment", "is_open"),
    [
        ("Mon-Fri 02:00-03:30 UTC", "2026-11-30T02:15:00", True),  # a Monday
        ("Mon-Fri 02:00-03:30 UTC", "2026-11-30T03:30:00", False),
        ("Mon-Fri 02:00-03:30 UTC", "2026-12-05T02:15:00", False),  # Saturday
        ("Sat,Sun 23:00-01:00 UTC", "2026-12-06T00:30:00", True),  # Sunday, in Saturday's window
        ("Sat,Sun 23:00-01:00 UTC", "2026-12-07T00:30:00", True),  # Monday, in Sunday's window
        ("Sat,Sun 23:00-01:00 UTC", "2026-12-08T00:30:00", False),
        ("daily 12:00-12:30", "2026-11-30T12:10:00", True),
    ],
)
def test_schedule(spec: str, moment: str, is_open: bool) -> None:
    now = datetime.fromisoformat(moment).replace(tzinfo=UTC)
    assert (ScheduledWindow.parse(spec).containing(now) is not None) == is_open


@pytest.mark.parametrize("spec", ["Mon-Fri", "Funday 01:00-02:00", "Mon 25:00-26:00", "Mon 01:00-01:00", ""])
def test_bad_schedules_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        ScheduledWindow.parse(spec)


def test_manual_open_and_close_override_the_schedule() -> None:
    monday = datetime(2026, 11, 30, 2, 15, tzinfo=UTC)
    windows = Windows(["Mon-Fri 02:00-03:30 UTC"], MemoryKV(), enforced=True)
    state = windows.state(monday)
    assert state.open and state.source == "schedule" and state.closes_at == "2026-11-30T03:30:00Z"
    assert not windows.close(monday).open  # closed for the rest of this window...
    assert not windows.state(datetime(2026, 11, 30, 3, 0, tzinfo=UTC)).open
    assert windows.state(datetime(2026, 12, 1, 2, 15, tzinfo=UTC)).open  # ...not the next one
    evening = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)
    assert windows.open(30, evening).source == "manual"
    assert windows.seconds_left(evening) == pytest.approx(1800)
    assert not windows.state(datetime(2026, 11, 30, 20, 31, tzinfo=UTC)).open
