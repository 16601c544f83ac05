"""Cache-through reads where extraction is not at hand: behind a shut downtime window the read waits and says so,
then runs once the window opens; on a cluster the API replica runs nothing and a worker takes the job up. Either
way each missing sample is extracted once and the next epoch asks for no extraction."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import client.training.cache_through as cache_through
from client import FeatureClient, FeatureDataset
from service.main import create_app
from service.settings import Settings
from tests.conftest import LiveServer, ServerProcess, wait_for
from tests.support.s3_server import Bucket
from tests.support.workers import Worker, cluster_env

FEATURESET = ["embed", 2]
SHUT = ["Sun 00:00-00:01 UTC"]  # shut but for a manual opening


def _samples(count: int, tag: str) -> list[dict]:
    return [{"id": f"{tag}{i}", "text": f"def {tag}_{i}(x): return x * {i}\n" * (2 + i)} for i in range(count)]


def _epoch(dataset: FeatureDataset) -> list[str]:
    return [dataset[i]["content_hash"] for i in range(len(dataset))]


def test_behind_a_shut_window_the_read_waits_says_so_and_runs_when_it_opens(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cache_through, "PROGRESS_S", 0.2)
    settings = Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", windows=SHUT)
    samples = _samples(4, "win")
    with LiveServer(create_app(settings)) as url, FeatureClient(url) as client:
        dataset = FeatureDataset(url, samples=samples, featureset=FEATURESET, on_missing="extract")
        read: list[str] = []
        reader = threading.Thread(target=lambda: read.extend(_epoch(dataset)), daemon=True)
        reader.start()
        wait_for(lambda: "waits for a downtime window to open" in capsys.readouterr().err, 30, "the progress line")
        assert reader.is_alive() and not list(client.entries())  # nothing runs while the window is shut
        client.open_window(10)
        reader.join(timeout=120)
        assert not reader.is_alive() and len(read) == 4
        (job,) = client.jobs()
        assert (job.total, job.done, job.failed) == (4, 4, 0)
        client.close_window()  # epoch 2 needs no window: it extracts nothing
        assert _epoch(dataset) == read and len(client.jobs()) == 1


def test_on_a_cluster_a_worker_takes_the_job_up(
    server_process: Callable[..., ServerProcess],
    workers: Callable[..., Worker],
    bucket: Bucket,
    postgres_url: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    shared = cluster_env(bucket, postgres_url, tiny_model_dir)
    api = server_process({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "api"), "HSSTORE_RUN_JOBS": "false"}).start()
    samples = _samples(3, "cl")
    with FeatureClient(api.url) as client:
        client.submit_job(samples[:1], featureset=FEATURESET, backends=["torch"])  # one stored before the epoch
        workers({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "w")}, "host-a:cpu")
        wait_for(lambda: len(list(client.entries())) == 1, 120, "the worker to store the first sample")
        dataset = FeatureDataset(api.url, samples=samples, featureset=FEATURESET, backend="torch", on_missing="extract")
        first = _epoch(dataset)
        ahead = client.jobs()[0]  # the newest: the dataset's
        assert (ahead.total, ahead.existing, ahead.done - ahead.existing) == (3, 1, 2)
        assert len(list(client.entries())) == 3 and _epoch(dataset) == first and len(client.jobs()) == 2
        stored = client.get(samples[2], layers=FEATURESET, backend="torch")
        assert torch.equal(dataset[2]["hidden_states"], stored.hidden_states)
