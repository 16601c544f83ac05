"""What an operator watches, scraped from a real service's /metrics through a warm job's life: the window shut, the
job queued and waiting; the window opened, the GPU taken from SGLang, the job's items, tokens and worker-seconds
advancing under a lease; the window closed, the GPU handed back and SGLang's canary checked. (A catalog's outage in
the scrape: tests/service/catalog/test_catalog_outage.py.)"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.main import create_app
from service.settings import Settings
from tests.conftest import LiveServer, wait_for
from tests.support.slow_writes import slow_writes

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(http: httpx.Client) -> Samples:
    text = http.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def one(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_a_warm_job_s_life_as_the_metrics_tell_it(windowed_settings: Settings, events, standin) -> None:
    samples = [{"text": f"def step_{i}(): pass"} for i in range(10)]
    with (
        slow_writes(0.3),
        LiveServer(create_app(windowed_settings, on_event=events.append)) as url,
        httpx.Client(base_url=url) as http,
    ):
        shut = scrape(http)
        assert one(shut, "hsstore_window_open") == 0 and one(shut, "hsstore_window_seconds_left") == 0
        assert one(shut, "hsstore_gpu_held") == 0 and one(shut, "hsstore_store_up") == 1
        assert {state: one(shut, "hsstore_jobs", state=state) for state in ("queued", "running")} == {
            "queued": 0,
            "running": 0,
        }
        assert not [name for name, _ in shut if name == "hsstore_sglang_canary"]  # no window yet: no verdict

        job = http.post("/v1/jobs", json={"samples": samples}).json()["id"]
        queued = scrape(http)
        assert one(queued, "hsstore_jobs", state="queued") == 1
        assert one(queued, "hsstore_job_items", job_id=job, state="pending") == 10
        assert one(queued, "hsstore_job_tokens_total", job_id=job) == 0

        http.post("/v1/window/open", json={"minutes": 10})
        wait_for(lambda: one(scrape(http), "hsstore_job_items", job_id=job, state="done") >= 2, what="a batch done")
        running = scrape(http)
        assert one(running, "hsstore_window_open") == 1 and 540 < one(running, "hsstore_window_seconds_left") <= 600
        assert one(running, "hsstore_gpu_held") == 1 and one(running, "hsstore_jobs", state="running") == 1
        assert one(running, "hsstore_job_tokens_total", job_id=job) > 0
        assert one(running, "hsstore_job_busy_seconds_total", job_id=job) > 0
        assert one(running, "hsstore_workers") == 1 and one(running, "hsstore_leased_items") >= 0

        http.post("/v1/window/close")
        wait_for(lambda: "healthy" in events, what="GPU handed back")
        wait_for(lambda: one(scrape(http), "hsstore_gpu_held") == 0, what="the model unloaded")
        handed_back = scrape(http)
        assert one(handed_back, "hsstore_window_open") == 0
        assert one(handed_back, "hsstore_sglang_canary", verdict="ok") == 1
        assert sum(one(handed_back, "hsstore_sglang_canary", verdict=v) for v in ("mismatch", "restarted")) == 0
        left = 10 - one(handed_back, "hsstore_job_items", job_id=job, state="done")
        assert one(handed_back, "hsstore_job_items", job_id=job, state="pending") == left > 0
