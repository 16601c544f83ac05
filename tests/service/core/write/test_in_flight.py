"""The extracting thread never waits on a write of the forward it has just launched (the GPU would sit idle until
that forward's results were written), and otherwise keeps at most `limit` writes in flight."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from service.core.write.writer import InFlight


def _adding(in_flight: InFlight, forward: int, write: Future[None]) -> threading.Thread:
    thread = threading.Thread(target=in_flight.add, args=(forward, write), daemon=True)
    thread.start()
    return thread


def test_all_results_of_one_forward_go_out_without_waiting() -> None:
    in_flight = InFlight(limit=2)
    writes = [Future() for _ in range(14)]  # a pack of 14 sequences, none written yet
    adding = _adding(in_flight, 0, writes[0])
    for write in writes[1:]:
        adding.join(5)
        assert not adding.is_alive(), "waited on a write of the forward it has just launched"
        adding = _adding(in_flight, 0, write)
    adding.join(5)
    assert not adding.is_alive()


def test_the_next_forward_waits_for_the_oldest_writes_down_to_the_limit() -> None:
    in_flight = InFlight(limit=2)
    earlier = [Future() for _ in range(3)]
    for write in earlier:
        in_flight.add(0, write)
    adding = _adding(in_flight, 1, Future())  # 4 in flight, limit 2: the two oldest of forward 0 must end first
    adding.join(0.2)
    assert adding.is_alive()
    earlier[0].set_result(None)
    adding.join(0.2)
    assert adding.is_alive()
    earlier[1].set_result(None)
    adding.join(5)
    assert not adding.is_alive()


def test_drain_waits_for_every_write_and_raises_a_failed_one() -> None:
    in_flight = InFlight(limit=8)
    done, failed = Future(), Future()
    done.set_result(None)
    failed.set_exception(OSError("disk"))
    in_flight.add(0, done)
    in_flight.add(0, failed)
    try:
        in_flight.drain()
    except OSError as exc:
        assert str(exc) == "disk"
    else:
        raise AssertionError("a failed write went unnoticed")


class _WrittenIn(Future[None]):
    """A write that ends `seconds` after the extracting thread starts waiting on it: a wait of at least that long
    whatever the host's load, where a timer started beside the wait could fire before the wait began."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def result(self, timeout: float | None = None) -> None:
        time.sleep(self.seconds)  # at least this long, on the monotonic clock perf_counter reads


def test_waits_are_counted_between_forwards_and_after_the_last() -> None:
    in_flight = InFlight(limit=1)
    for _ in range(2):
        in_flight.add(0, _WrittenIn(0.1))
    assert in_flight.waited_s["between_forwards"] < 0.1  # nothing waited on: both are the newest forward's
    in_flight.add(1, _WrittenIn(0.1))  # down to the limit: both of forward 0's writes waited on, one after the other
    assert in_flight.waited_s["between_forwards"] >= 0.2
    assert in_flight.waited_s["after_last"] == 0
    in_flight.drain()  # forward 1's write
    assert in_flight.waited_s["after_last"] >= 0.1
