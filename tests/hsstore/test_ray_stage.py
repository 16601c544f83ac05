"""Extraction as a Ray Data stage on a local Ray cluster (127.0.0.1, CPU actors, the tiny model), writing where a
fleet's workers write: moto's S3 server and the machine's Postgres. What the stage stores is what the service stores
for the same samples, bit for bit; a second run extracts nothing; an actor killed mid-batch leaves every sample
stored exactly once."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

from hsstore import ray_stage
from hsstore.ray_stage import ExtractSamples, extract_samples
from schemas.api import ExtractRequest
from schemas.keys import EntryFilter
from service.main import build_services
from service.settings import Settings
from tests.conftest import REPO
from tests.support.s3_server import Bucket
from tests.support.workers import cluster_env

SAMPLES = [{"id": f"s{i}", "text": f"def ray_{i}(x):\n    return x * {i}\n" * (1 + i % 3)} for i in range(6)]
DIE_MARKER = "HSSTORE_TEST_DIE_MARKER"


def _actor_env(bucket: Bucket, postgres_url: str, model_dir: Path, data_dir: Path, **extra: str) -> dict[str, Any]:
    """What each actor reads its settings from, as `hsstore worker` does: the fleet's bucket and catalog."""
    env = {**cluster_env(bucket, postgres_url, model_dir), "HSSTORE_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    return {"env_vars": {**env, **extra}}


def _replica(bucket: Bucket, postgres_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A replica of the fleet without a model: what an operator's `hsstore` talks to."""
    for name, value in bucket.env().items():
        monkeypatch.setenv(name, value)
    return build_services(
        Settings(data_dir=data_dir, store_url=bucket.url, s3_endpoint=bucket.endpoint, catalog_url=postgres_url)
    )


def _stored(bucket: Bucket, postgres_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every version the fleet's catalog holds."""
    reader = _replica(bucket, postgres_url, data_dir, monkeypatch)
    try:
        return reader.versions.find(EntryFilter(), limit=1000)
    finally:
        reader.close()


@pytest.mark.usefixtures("local_ray")
def test_the_stage_stores_the_services_bits_and_a_second_run_extracts_nothing(
    bucket: Bucket,
    postgres_url: str,
    tiny_model_dir: Path,
    tiny_loaded: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = _actor_env(bucket, postgres_url, tiny_model_dir, tmp_path / "actors")
    first = extract_samples(ray.data.from_items(SAMPLES), concurrency=2, num_gpus=0, batch_size=2, runtime_env=env)
    rows = {row["sample_id"]: row for row in first.take_all()}
    assert sorted(rows) == [s["id"] for s in SAMPLES]
    assert {row["status"] for row in rows.values()} == {"extracted"}

    plain = build_services(Settings(data_dir=tmp_path / "service", device="cpu"), tiny_loaded)
    by_service = plain.writer.extract(ExtractRequest(samples=SAMPLES)).results
    plain.close()
    assert {r.sample_id: r.manifest.content_hash for r in by_service} == {
        sample_id: row["content_hash"] for sample_id, row in rows.items()
    }

    again = extract_samples(ray.data.from_items(SAMPLES), concurrency=1, num_gpus=0, batch_size=3, runtime_env=env)
    assert {row["status"] for row in again.take_all()} == {"existing"}
    stored = _stored(bucket, postgres_url, tmp_path / "reader", monkeypatch)
    assert sorted(m.content_hash for m in stored) == sorted(row["content_hash"] for row in rows.values())


class DiesOnceMidBatch(ExtractSamples):
    """An actor killed mid-batch: the first time any actor runs a batch of several samples, it stores half of it,
    says how many in the marker file, and its process dies."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        marker = Path(os.environ[DIE_MARKER])
        if batch.num_rows > 1 and not marker.exists():
            half = batch.num_rows // 2
            super().__call__(batch.slice(0, half))
            marker.write_text(str(half))
            os._exit(1)
        return super().__call__(batch)


@pytest.mark.usefixtures("local_ray")
def test_an_actor_killed_mid_batch_leaves_every_sample_stored_exactly_once(
    bucket: Bucket, postgres_url: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "died"
    env = _actor_env(bucket, postgres_url, tiny_model_dir, tmp_path / "actors", **{DIE_MARKER: str(marker)})
    monkeypatch.setattr(ray_stage, "ExtractSamples", DiesOnceMidBatch)
    stage = extract_samples(ray.data.from_items(SAMPLES), concurrency=1, num_gpus=0, batch_size=6, runtime_env=env)
    rows = stage.take_all()
    assert marker.exists(), "no actor died: the test proves nothing"
    stored_by_the_dead = int(marker.read_text())
    assert stored_by_the_dead >= 1
    assert sorted(row["sample_id"] for row in rows) == [s["id"] for s in SAMPLES]  # each sample's row once
    # the batch ran again on the restarted actor: what the dead one stored was found, the rest extracted
    statuses = [row["status"] for row in rows]
    assert (statuses.count("existing"), statuses.count("extracted")) == (stored_by_the_dead, 6 - stored_by_the_dead)
    stored = _stored(bucket, postgres_url, tmp_path / "reader", monkeypatch)
    assert sorted(m.content_hash for m in stored) == sorted(row["content_hash"] for row in rows)


@pytest.mark.usefixtures("local_ray")
def test_a_host_under_windows_extracts_only_once_one_opens(
    bucket: Bucket, postgres_url: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shut = '["Sun 00:00-00:01 UTC"]'  # a schedule whose window is shut now, but for a manual opening
    env = _actor_env(bucket, postgres_url, tiny_model_dir, tmp_path / "actors", HSSTORE_WINDOWS=shut)
    stage = extract_samples(
        ray.data.from_items(SAMPLES[:2]), num_gpus=0, batch_size=2, window_poll_s=0.5, runtime_env=env
    )
    rows: Future[list[dict[str, Any]]] = Future()
    # a daemon thread, not an executor's: should no window ever reach the actor, the test fails after its timeout
    # rather than waiting on the stage forever on the way out
    threading.Thread(target=lambda: rows.set_result(stage.take_all()), daemon=True).start()
    time.sleep(10)  # the actor is up (a few seconds here) and waiting for a window
    assert not rows.done() and _stored(bucket, postgres_url, tmp_path / "reader", monkeypatch) == []
    operator = _replica(bucket, postgres_url, tmp_path / "operator", monkeypatch)
    operator.windows.open(30)  # `hsstore window open --minutes 30`: in the catalog every host reads
    operator.close()
    assert {row["status"] for row in rows.result(timeout=120)} == {"extracted"}
