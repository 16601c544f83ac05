"""`hsstore worker` processes for tests of a cluster: `workers(env, name, pause_s=0)` starts one (with `pause_s`, its
writes pause inside each blob, for a kill mid-write); each is stopped after the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.s3_server import Bucket
from tests.support.slow_writes import PAUSE_ENV

REPO = Path(__file__).resolve().parents[2]


def cluster_env(bucket: Bucket, postgres_url: str, model_dir: Path) -> dict[str, str]:
    """What every process of an extracting cluster shares: the bucket, the Postgres catalog, the model (on the CPU);
    each adds its own `HSSTORE_DATA_DIR`."""
    return {
        **bucket.env(),
        "HSSTORE_CATALOG_URL": postgres_url,
        "HSSTORE_MODEL_DIR": str(model_dir),
        "HSSTORE_DEVICE": "cpu",
    }


class Worker:
    def __init__(self, env: dict[str, str], name: str, pause_s: float = 0.0) -> None:
        self.name = name
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the object
        module = "tests.support.slow_writes" if pause_s else "hsstore.cli"
        extra = {PAUSE_ENV: str(pause_s)} if pause_s else {}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "worker", "--device", "cpu"],
            env={**os.environ, **env, **extra, "HSSTORE_WORKER_NAME": name},
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def workers() -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(env: dict[str, str], name: str, pause_s: float = 0.0) -> Worker:
        started.append(Worker(env, name, pause_s))
        return started[-1]

    yield start
    for worker in started:
        worker.stop()
