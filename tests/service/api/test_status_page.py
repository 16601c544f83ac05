"""The status page in a real headless browser (Debian's chromium, over the DevTools protocol) against a real service:
it loads with no console error and nothing fetched from elsewhere, shows a warm job advancing while the service runs
it — and while a real `hsstore worker` of a cluster runs it — a window opening (with its countdown) and closing (the
GPU handed back, SGLang's canary checked), what the store holds, and a comparison of two backends drawn layer by
layer; behind tokens it asks for one and reads with it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from client import FeatureClient
from service.main import create_app
from service.settings import Settings
from tests.conftest import LiveServer, wait_for
from tests.support.browser import Page
from tests.support.slow_writes import slow_writes
from tests.support.workers import cluster_env

# where the screenshot of the page during a warm job goes: docs/status-page.png was made with
# STATUS_PAGE_SCREENSHOT=docs/status-page.png pytest tests/service/api/test_status_page.py
SHOT_TO = "STATUS_PAGE_SCREENSHOT"


def _done(page: Page, job_id: str) -> int:
    return int(page.evaluate(f"Number((document.getElementById('job-{job_id}') || {{dataset: {{}}}}).dataset.done)"))


def _requests_elsewhere(page: Page, url: str) -> list[str]:
    """Every resource the page loaded that is not the service's own."""
    loaded: list[Any] = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    return [name for name in loaded if not name.startswith(url)]


def test_the_status_page_follows_a_warm_job_and_a_window(
    windowed_settings: Settings, events, standin, browser, tmp_path: Path
) -> None:
    samples = [{"text": f"def page_{i}(x): return x - {i}"} for i in range(40)]
    app = create_app(windowed_settings, on_event=events.append)
    with slow_writes(0.3), LiveServer(app) as url, httpx.Client(base_url=url) as http:
        page = browser()
        page.open(f"{url}/status")
        page.wait_for("document.body.dataset.loaded === 'true'", what="the first refresh")
        assert page.text("window-state") == "shut" and page.text("window-countdown") == ""

        job = http.post("/v1/jobs", json={"samples": samples}).json()["id"]
        page.wait_for(f"document.getElementById('job-{job}') !== null", what="the job's row")
        assert "waiting for a window" in page.text(f"job-{job}")

        http.post("/v1/window/open", json={"minutes": 10})
        page.wait_for("document.getElementById('window-state').textContent === 'open'", what="the window open")
        assert 540 < int(page.evaluate("document.getElementById('window-countdown').dataset.seconds")) <= 600
        page.wait_for(f"Number(document.getElementById('job-{job}').dataset.done) >= 2", what="the job advancing")
        assert "hsstore's" in page.text("window-gpu")  # read in the refresh that saw the job run
        first = _done(page, job)
        wait_for(lambda: _done(page, job) > first, what="the job advancing further on the page")
        shot = Path(os.environ.get(SHOT_TO) or tmp_path / "status-page.png")
        page.screenshot(shot)
        assert shot.read_bytes().startswith(b"\x89PNG")

        http.post("/v1/window/close")
        page.wait_for("document.getElementById('window-state').textContent === 'shut'", what="the window shut")
        page.wait_for("document.getElementById('window-canary').textContent.includes('ok')", what="the canary")
        assert "SGLang's" in page.text("window-gpu")
        assert page.text("store-rows").count("torch") + page.text("store-rows").count("fla") >= 1

        assert page.errors == [] and _requests_elsewhere(page, url) == []


def test_the_page_shows_a_worker_of_a_cluster_running_a_job_in_a_window(
    server_process, workers, bucket, postgres_url: str, tiny_model_dir: Path, tmp_path: Path, browser
) -> None:
    """An API replica that runs nothing, one `hsstore worker` process, one Postgres catalog and one S3-API bucket:
    the window opened on the replica reaches the worker through the catalog, the page shows the worker's lease and
    the job advancing as the worker runs it, then the window shut and the job waiting."""
    shared = {
        **cluster_env(bucket, postgres_url, tiny_model_dir),
        "HSSTORE_JOB_BATCH_SIZE": "1",
        "HSSTORE_WINDOWS": '["Sun 03:00-03:01 UTC"]',  # shut but for a minute a week: opened by hand below
    }
    api = server_process({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "api"), "HSSTORE_RUN_JOBS": "false"}).start()
    workers({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "w")}, "gpu-1:cpu", pause_s=0.5)
    samples = [{"text": f"def cluster_{i}(x): return x + {i}"} for i in range(30)]
    with FeatureClient(api.url) as client, httpx.Client(base_url=api.url) as http:
        job = client.submit_job(samples, backends=["torch"]).id
        page = browser()
        page.open(f"{api.url}/status")
        page.wait_for(f"document.getElementById('job-{job}') !== null", what="the job's row")
        assert page.text("window-state") == "shut" and "waiting for a window" in page.text(f"job-{job}")

        http.post("/v1/window/open", json={"minutes": 10})
        page.wait_for("document.getElementById('window-state').textContent === 'open'", what="the window open")
        page.wait_for("document.getElementById('workers-rows').textContent.includes('gpu-1:cpu')", 120, "the lease")
        page.wait_for(f"Number(document.getElementById('job-{job}').dataset.done) >= 2", 120, "the job advancing")
        first = _done(page, job)
        wait_for(lambda: _done(page, job) > first, what="the worker going on")

        http.post("/v1/window/close")
        page.wait_for("document.getElementById('window-state').textContent === 'shut'", what="the window shut")
        page.wait_for(f"document.getElementById('job-{job}').textContent.includes('waiting')", 60, "the job waiting")
        assert page.errors == [] and _requests_elsewhere(page, api.url) == []


def test_a_comparison_is_drawn_per_layer(settings: Settings, tiny_loaded, browser) -> None:
    """On a CPU host only the torch backend runs: an entry compared with itself, every layer equal bit for bit."""
    with LiveServer(create_app(settings, tiny_loaded)) as url, FeatureClient(url) as client:
        sample = {"text": "def compared(x): return x * 2"}
        prompt_hash = client.extract([sample], backend="torch").results[0].manifest.prompt_hash
        page = browser()
        page.open(f"{url}/status")
        page.wait_for("document.body.dataset.loaded === 'true'", what="the first refresh")
        offered = "[...document.querySelectorAll('#compare-hashes option')].map(o => o.value)"
        page.wait_for(f"{offered}.includes('{prompt_hash}')", what="the entry offered for a comparison")
        page.evaluate(
            f"document.getElementById('compare-hash').value = {json.dumps(prompt_hash)};"
            "document.getElementById('compare-a').value = 'torch';"
            "document.getElementById('compare-b').value = 'torch';"
            "document.getElementById('compare-form').requestSubmit()"
        )
        page.wait_for("document.querySelectorAll('#fidelity-chart rect').length > 0", what="the chart")
        report = client.compare(prompt_hash=prompt_hash, a="torch", b="torch")
        assert page.evaluate("document.querySelectorAll('#fidelity-chart rect.equal').length") == len(report.layers)
        assert page.evaluate("document.querySelectorAll('#fidelity-rows tr').length") == len(report.layers) > 0
        assert page.errors == []


def test_behind_tokens_the_page_asks_for_one_and_reads_with_it(tmp_path: Path, browser) -> None:
    token = "status-page-token"
    settings = Settings(data_dir=tmp_path / "store", tokens={token: ["read"]})
    with LiveServer(create_app(settings)) as url:
        assert httpx.get(f"{url}/v1/window").status_code == 401  # the page's data stays behind the token
        page = browser()
        page.open(f"{url}/status")
        page.wait_for("!document.getElementById('token-form').hidden", what="the token form")
        page.evaluate(
            f"document.getElementById('token').value = {json.dumps(token)};"
            "document.getElementById('token-form').requestSubmit()"
        )
        page.wait_for("document.body.dataset.loaded === 'true'", what="a refresh with the token")
        assert page.text("window-state") == "open" and page.errors == []
