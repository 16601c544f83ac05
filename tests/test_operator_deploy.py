"""The operator's files in deploy/ proven against the real tools (Debian's Prometheus and promtool, installed by
`scripts/packages-for-tests.sh` as `make test` starts): the alert rules and the example config check, the rules'
unit tests fire where they should and stay quiet where they should not, and a real Prometheus scraping a real
`hsstore serve` and a real `hsstore worker` (one Postgres catalog, one S3-API bucket) while a warm job runs loads
the rules healthy and answers every query of the Grafana dashboard with series."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from client import FeatureClient
from tests.conftest import ServerProcess, free_port, wait_for
from tests.support.s3_server import Bucket
from tests.support.workers import Worker, cluster_env

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "hsstore-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "hsstore-dashboard.json"


def _promtool(*args: str) -> str:
    done = subprocess.run(["promtool", *args], cwd=RULES.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"]) for panel in panels for target in panel["targets"]]


def test_the_rules_and_the_example_config_check_and_the_rules_unit_tests_pass() -> None:
    assert "SUCCESS: 9 rules found" in _promtool("check", "rules", RULES.name)
    _promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in _promtool("test", "rules", "hsstore-alerts.test.yml")
    alerts = {line.split(":", 1)[1].strip() for line in RULES.read_text().splitlines() if "- alert:" in line}
    tested = (RULES.parent / "hsstore-alerts.test.yml").read_text()
    assert alerts and all(f"alertname: {alert}" in tested for alert in alerts)  # every alert has its cases


class Prometheus:
    """Debian's `prometheus`, on a free loopback port, scraping `targets` (job name -> host:port) every second."""

    def __init__(self, targets: dict[str, str], workdir: Path) -> None:
        shutil.copy(RULES, workdir / RULES.name)
        jobs = [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [RULES.name],
            "scrape_configs": jobs,
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.url = f"http://127.0.0.1:{free_port()}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the object
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def query(self, expr: str) -> list[dict]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", (expr, answer)
        return list(answer["data"]["result"])

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode()[-3000:]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: dict[str, str]) -> Prometheus:
        started.append(Prometheus(targets, tmp_path))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def test_a_real_prometheus_scraping_a_service_and_a_worker_answers_every_dashboard_query(
    server_process: Callable[..., ServerProcess],
    workers: Callable[..., Worker],
    prometheus: Callable[[dict[str, str]], Prometheus],
    bucket: Bucket,
    postgres_url: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    shared = {**cluster_env(bucket, postgres_url, tiny_model_dir), "HSSTORE_JOB_BATCH_SIZE": "1"}
    api = server_process({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "api"), "HSSTORE_RUN_JOBS": "false"}).start()
    metrics_port = free_port()
    worker_env = {**shared, "HSSTORE_DATA_DIR": str(tmp_path / "w"), "HSSTORE_METRICS_PORT": str(metrics_port)}
    worker = workers(worker_env, "gpu-1:cpu", pause_s=1.0)  # each blob's write pauses: the job stays active
    server = prometheus({"hsstore": api.url.removeprefix("http://"), "hsstore-workers": f"127.0.0.1:{metrics_port}"})
    samples = [{"text": f"def scraped_{i}(x): return x * {i}\n" * 3} for i in range(30)]
    with FeatureClient(api.url) as client:
        job = client.submit_job(samples, backends=["torch"])
        wait_for(lambda: client.job(job.id).done >= 2, 180, "the worker to store two samples")
        assert client.job(job.id).state == "running", "the job ended before it could be watched"

        def scraped(expr: str) -> bool:
            return bool(server.query(expr))

        wait_for(lambda: scraped('up{job="hsstore-workers"} == 1'), 60, f"the worker's scrape: {server.output()}")
        wait_for(lambda: scraped('up{job="hsstore"} == 1'), 60, "the service's scrape")
        wait_for(lambda: scraped("rate(hsstore_job_tokens_total[5m]) > 0"), 60, "two scrapes of a job extracting")
        empty = [(title, expr) for title, expr in dashboard_queries() if not server.query(expr)]
        assert empty == [], empty
        assert server.query('hsstore_job_items{state="done"}')[0]["metric"]["job_id"] == job.id
        assert server.query("hsstore_gpu_held")[0]["metric"]["job"] == "hsstore-workers"  # the worker's GPU
        rules = httpx.get(f"{server.url}/api/v1/rules", timeout=10).json()["data"]["groups"][0]["rules"]
        assert len(rules) == 9 and {rule["health"] for rule in rules} == {"ok"}, rules
        assert not [r["name"] for r in rules if r["state"] == "firing"]  # a healthy cluster pages no one
    assert worker.proc.poll() is None  # watched, not disturbed
