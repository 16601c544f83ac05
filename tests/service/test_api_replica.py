"""An API replica of a cluster (run_jobs=false) owns no GPU: with a model directory it tokenises and takes jobs for
the workers, and it never loads the weights, even with them on its disk and an extraction asked of it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from service.core.startup import startup_lines
from service.main import build_services, create_app
from service.settings import Settings
from tests.conftest import LiveServer


def test_a_replica_takes_jobs_refuses_to_extract_and_never_loads_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    settings = Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", run_jobs=False)
    app = create_app(settings)
    with LiveServer(app) as url, httpx.Client(base_url=url) as http:
        refused = http.post("/v1/extract", json={"samples": [{"text": "def f(): pass"}]})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "model_unavailable"
        assert "submit a job" in refused.json()["error"]["message"]
        job = http.post("/v1/jobs", json={"samples": [{"text": "def f(): pass"}, {"token_ids": [1, 2, 3]}]})
        assert job.status_code < 300, job.text
        time.sleep(0.5)
        status = http.get(f"/v1/jobs/{job.json()['id']}").json()
        assert (status["total"], status["done"], status["state"]) == (2, 0, "queued")  # the workers' to run
        assert not app.state.services.models.loaded


def test_a_replicas_start_up_lines_say_who_extracts(tmp_path: Path, tiny_model_dir: Path) -> None:
    services = build_services(
        Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", run_jobs=False)
    )
    try:
        lines = "\n".join(startup_lines(services.settings, services.models, services.store, services.windows))
    finally:
        services.close()
    assert "config and tokenizer only" in lines and "window" not in lines
    assert "run_jobs=false: this replica loads no weights" in lines
