"""Concurrent identical extractions share one forward: one request leads, the others wait for its result."""

from __future__ import annotations

import threading

import httpx
import pytest

from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer
from tests.support.slow_writes import slow_writes

SAMPLE = {"text": "def shared(): return 'one forward for all'"}


def test_sixteen_simultaneous_requests_run_one_forward(
    settings: Settings, tiny_loaded: LoadedModel, forward_sizes: list[int]
) -> None:
    from service.main import create_app

    start = threading.Barrier(16)
    answers: list[httpx.Response] = []

    def request(url: str) -> None:
        start.wait()
        answers.append(httpx.post(f"{url}/v1/extract", json={"samples": [SAMPLE]}, timeout=120))

    # the leader's write takes a while, so every other request arrives while its forward is in flight
    with slow_writes(0.5), LiveServer(create_app(settings, tiny_loaded)) as url:
        threads = [threading.Thread(target=request, args=(url,)) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert len(answers) == 16 and all(a.status_code == 200 for a in answers)
    results = [a.json()["results"][0] for a in answers]
    assert len(forward_sizes) == 1
    assert len({r["manifest"]["content_hash"] for r in results}) == 1
    assert sorted(r["status"] for r in results) == ["existing"] * 15 + ["extracted"]


def test_a_failed_flight_fails_its_followers_and_the_next_request_leads_anew() -> None:
    from service.core.write.single_flight import SingleFlight

    flights: SingleFlight[str, int] = SingleFlight()
    lead, leads = flights.join("k")
    follow, follows_leads = flights.join("k")
    assert leads and not follows_leads and follow is lead
    flights.land("k", lead, error=RuntimeError("forward failed"))
    with pytest.raises(RuntimeError, match="forward failed"):
        follow.result(timeout=1)
    again, leads_again = flights.join("k")
    assert leads_again and again is not lead
    flights.land("k", lead, 5)  # a late landing of the old flight leaves the new one alone
    assert not again.done()
    flights.land("k", again, 7)
    assert again.result(timeout=1) == 7
