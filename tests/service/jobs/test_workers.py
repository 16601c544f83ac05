"""One worker per GPU on one queue (here two CPU workers, one Postgres catalog, one S3-API bucket): items are claimed
under leases, a worker killed mid-item has its item taken over once its lease runs out, and every sample is stored
exactly once — also when both workers go by one name (a name is a label; leases belong to the process)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from client import FeatureClient
from service.jobs.lease_holder import LeaseHolder
from tests.conftest import ServerProcess, wait_for
from tests.support.s3_server import Bucket
from tests.support.workers import Worker, cluster_env

LEASE_S = 3.0


def _leases(postgres_url: str) -> dict[str, LeaseHolder | None]:
    """Pending items and the process holding each (None: nobody)."""
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT idx || '/' || backend, lease_owner FROM job_items WHERE state = 'pending'")
        return {item: None if owner is None else LeaseHolder.parse(owner) for item, owner in rows.fetchall()}


def _held_by(postgres_url: str, worker: Worker) -> list[str]:
    return [i for i, h in _leases(postgres_url).items() if h is not None and h.pid == worker.proc.pid]


def _half_written(bucket: Bucket) -> bool:
    """Some blob has arrays in the bucket but not the group object that publishes it."""
    import obstore

    paths = [m["path"] for batch in obstore.list(bucket.obstore(), prefix="blobs/") for m in batch]
    blobs = {"/".join(p.split("/")[:3]) for p in paths}
    return any(f"{blob}/zarr.json" not in paths for blob in blobs)


@pytest.mark.parametrize(
    ("doomed_name", "survivor_name", "survivor_first"),
    [("host-a:cuda:0", "host-b:cuda:1", False), ("vm:cpu", "vm:cpu", True)],
    ids=["named-apart", "one-name-both-running"],
)
def test_a_worker_killed_mid_item_loses_it_to_the_other_and_every_sample_is_stored_once(
    doomed_name: str,
    survivor_name: str,
    survivor_first: bool,
    server_process: Callable[..., ServerProcess],
    workers: Callable[..., Worker],
    bucket: Bucket,
    postgres_url: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    shared = {
        **cluster_env(bucket, postgres_url, tiny_model_dir),
        "HSSTORE_LEASE_S": str(LEASE_S),
        "HSSTORE_JOB_BATCH_SIZE": "1",
    }
    # the API replica takes jobs and serves; it runs none (its host's GPU, if any, is the workers')
    api = server_process({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "api"), "HSSTORE_RUN_JOBS": "false"}).start()
    samples = [{"id": f"w{i}", "text": f"def worker_{i}(x): return x + {i}\n" * (3 + i)} for i in range(6)]
    with FeatureClient(api.url) as client:
        job = client.submit_job(samples, backends=["torch"], featureset=["embed", 2])
        time.sleep(1.0)
        assert client.job(job.id).done == 0  # nobody runs it yet: the API replica runs no jobs

        doomed = workers({**shared, "HSSTORE_DATA_DIR": str(tmp_path / "w1")}, doomed_name, pause_s=60)
        wait_for(lambda: _held_by(postgres_url, doomed), 120, "the first worker to claim an item")
        held = _held_by(postgres_url, doomed)
        assert {h.label for h in _leases(postgres_url).values() if h is not None} == {doomed_name}
        wait_for(lambda: _half_written(bucket), 60, "the first worker to be inside a blob's write")
        survivor_env = {**shared, "HSSTORE_DATA_DIR": str(tmp_path / "w2")}
        if survivor_first:  # its heartbeat runs while its namesake dies: it must not keep the dead one's leases
            survivor = workers(survivor_env, survivor_name)
            wait_for(lambda: "held as" in survivor.output(), 120, "the second worker to start")
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(timeout=30)

        if not survivor_first:
            survivor = workers(survivor_env, survivor_name)
        wait_for(lambda: client.job(job.id).state == "done", 180, "the job to finish on the surviving worker")
        status = client.job(job.id)
        assert (status.done, status.failed, status.pending) == (len(samples), 0, 0)

        # every sample stored exactly once: one version per sample, one blob per version, all of them readable
        entries = list(client.entries())
        assert sorted(m.prompt_hash for m in entries) == sorted({m.prompt_hash for m in entries})
        assert len(entries) == len(samples)
        for manifest in entries:
            assert client.fetch(manifest.feature_key()).content_hash == manifest.content_hash
    with psycopg.connect(postgres_url) as conn:
        owners = dict(conn.execute("SELECT idx || '/' || backend, content_hash FROM job_items").fetchall())
    assert held and all(owners[item] is not None for item in held)  # the killed worker's items: done by the survivor
    assert not _half_written(bucket)  # its half-written blob was completed by the survivor's write of the same bits
    assert "stopped" not in doomed.output()  # it died, it did not stop cleanly
    assert (tmp_path / "w2" / "worker.alive").is_file()  # what the deploy files' health checks read
    survivor.stop()
    assert "stopped; its unfinished items are free" in survivor.output()
