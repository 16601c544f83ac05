"""Leases name the process that holds them: two workers may share a name, and only a dead earlier run of this very
worker (same name, host and PID namespace, its PID gone) is handed back at a restart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from schemas.job_api import JobRequest
from service.jobs.lease_holder import LeaseHolder
from service.main import build_services
from service.settings import Settings
from tests.conftest import wait_for


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(done.stdout)


def test_two_processes_of_one_name_hold_leases_apart() -> None:
    first, second = LeaseHolder.this_process("vm:cpu"), LeaseHolder.this_process("vm:cpu")
    assert first.id != second.id  # even in one process: each run draws its nonce
    assert LeaseHolder.parse(first.id) == first
    assert LeaseHolder.parse("vm:cpu") is None  # a lease written before leases named processes


def test_only_a_dead_earlier_run_of_the_same_worker_is_succeeded() -> None:
    me = LeaseHolder.this_process("host-a:cuda:0")
    dead = replace(me, pid=_dead_pid(), nonce="0")
    assert me.succeeds(dead)
    assert me.succeeds(replace(me, nonce="0"))  # an earlier run with our PID is not running: we are
    assert not me.succeeds(me)
    assert not me.succeeds(replace(dead, pid=os.getppid()))  # alive: a namesake, not a predecessor
    assert not me.succeeds(replace(dead, label="host-a:cuda:1"))
    assert not me.succeeds(replace(dead, host="another-host"))
    assert not me.succeeds(replace(dead, namespace=dead.namespace + 1))  # its PIDs are not ours to look up


def test_a_restart_takes_back_at_once_what_its_dead_run_held_and_never_what_a_live_namesake_holds(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", worker_name="vm:cpu", lease_s=600
    )
    services = build_services(settings)
    assert services.runner is not None
    try:
        job = services.queue.submit(JobRequest(samples=[{"text": "def a(): pass"}, {"text": "def b(): pass"}]))
        me = services.runner.holder
        predecessor, namesake = replace(me, pid=_dead_pid(), nonce="0"), replace(me, pid=os.getppid(), nonce="1")
        for holder in (predecessor, namesake):  # each claims one item for ten minutes
            assert len(services.jobs.claim_items(job.id, holder.id, 1, 600)) == 1
        services.runner.start()
        wait_for(lambda: services.queue.status(job.id).done == 1, 60, "the dead run's item, taken back at once")
        time.sleep(1.0)
        status = services.queue.status(job.id)
        assert (status.done, status.pending) == (1, 1)  # the live namesake's item stays its own
        assert [lease.worker for lease in services.jobs.live_leases()] == [namesake.id]
    finally:
        services.runner.stop()
        services.close()
