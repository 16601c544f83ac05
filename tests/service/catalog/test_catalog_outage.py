"""The catalog's Postgres stopped and started again under a running service (the machine's own cluster, as
`scripts/postgres-for-tests.sh` runs it): while it is down, listings and reads answer 503 `catalog_unavailable` with
Retry-After, and readiness 503, each within a few seconds, not the pool's 30; once it is back, the first request
succeeds, a readiness probe as a read (connections left from before the restart are checked and replaced, never
failed on)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client import CatalogUnavailableError, FeatureClient
from service.main import create_app
from service.settings import Settings
from tests.conftest import LiveServer, coding_prompts
from tests.support.postgres_server import postgres_held, throwaway_database

OUTAGE_S = 10


def _cluster() -> list[str]:
    version, name = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True).stdout.split()[:2]
    return [version, name]


def _pg(action: str) -> None:
    subprocess.run(["pg_ctlcluster", *_cluster(), action, *(["-m", "fast"] if action == "stop" else [])], check=True)
    if action == "start":
        for _ in range(100):
            if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("Postgres did not come back")


@pytest.fixture
def stoppable_postgres(postgres_admin: str) -> Iterator[str]:
    with postgres_held(alone=True), throwaway_database(postgres_admin) as url:  # no other test meets the outage
        try:
            yield url
        finally:  # whatever happened, the rest of the suite gets its Postgres back
            if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode != 0:
                _pg("start")


def test_a_stopped_catalog_is_a_quick_503_and_a_restarted_one_answers_the_first_request(
    stoppable_postgres: str, tiny_model_dir: Path, tiny_loaded, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "d", model_dir=tiny_model_dir, device="cpu", catalog_url=stoppable_postgres)
    with LiveServer(create_app(settings, tiny_loaded)) as url, FeatureClient(url) as client:
        client.extract([coding_prompts()[0]])
        assert len(list(client.entries())) == 1
        _pg("stop")
        stopped = time.monotonic()
        for path in ("/v1/entries", f"/v1/features/{'0' * 64}", "/readyz"):
            started = time.monotonic()
            answer = httpx.get(f"{url}{path}", timeout=60)
            assert time.monotonic() - started < 5, path
            assert answer.status_code == 503, (path, answer.text)
            if path != "/readyz":
                assert answer.json()["error"]["code"] == "catalog_unavailable"
                assert answer.headers["Retry-After"] == "2"
        with pytest.raises(CatalogUnavailableError):
            list(client.entries())
        started = time.monotonic()
        scraped = httpx.get(f"{url}/metrics", timeout=60)  # answers, naming what it could not read, and leaves it out
        assert scraped.status_code == 200 and time.monotonic() - started < 15
        assert "hsstore_catalog_up 0.0" in scraped.text and "hsstore_store_up 1.0" in scraped.text
        assert "hsstore_jobs{" not in scraped.text and "hsstore_window_open 1.0" in scraped.text  # no schedule: always
        # long enough an outage that the pool, retrying 1, 2, 4, 8 s apart, waits seconds yet when the server is back
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
        _pg("start")
        # the pool's connections all died with the server, and it backs off before making new ones
        assert httpx.get(f"{url}/readyz", timeout=60).status_code == 200
        first = httpx.get(f"{url}/v1/entries", timeout=60)
        assert first.status_code == 200, first.text
        assert len(first.json()["entries"]) == 1
        scraped = httpx.get(f"{url}/metrics", timeout=60).text
        assert "hsstore_catalog_up 1.0" in scraped and 'hsstore_jobs{state="queued"} 0.0' in scraped
