"""One extraction per entry key at a time: the first request for a key leads, and requests that arrive while it is in
flight wait for its result instead of running their own forward."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[K, Future[V]] = {}

    def join(self, key: K) -> tuple[Future[V], bool]:
        """The flight for `key` and whether this caller leads it (and so must `land` it, whatever happens)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = Future()
            self._flights[key] = flight
            return flight, True

    def land(self, key: K, flight: Future[V], result: V | None = None, error: BaseException | None = None) -> None:
        """End the flight its leader joined: followers get `result`, or `error` raised; the next request for `key`
        leads anew. Landing twice, or after the key has a new flight, changes nothing of the new one."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        if flight.done():
            return
        if error is not None:
            flight.set_exception(error)
        else:
            flight.set_result(result)  # type: ignore[arg-type]  # a leader without an error landed a V
