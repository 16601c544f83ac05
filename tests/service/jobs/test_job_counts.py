"""A job's tokens are those its entries hold: an entry written for it by a worker that died before recording its
item (found stored by the one that took the item over) counts as the job's work, one stored before the job was
submitted as already stored; the rate is the cluster's, over the job's elapsed time."""

from __future__ import annotations

import time
from pathlib import Path

from schemas.api import ExtractRequest
from schemas.job_api import JobRequest
from schemas.keys import EntryFilter
from service.main import build_services
from service.settings import Settings
from tests.conftest import wait_for

SAMPLES = [{"text": "def before(): pass"}, {"text": "def written_by_the_dead(): return 1"}, {"text": "def rest(): ..."}]


def test_tokens_count_what_the_job_stored_even_where_a_dead_worker_wrote_it(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    services = build_services(Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu"))
    assert services.runner is not None
    try:
        before = services.writer.extract(ExtractRequest(samples=[SAMPLES[0]]), run_now=True).results[0].manifest
        time.sleep(0.01)
        job = services.queue.submit(JobRequest(samples=SAMPLES))
        # a worker that died after its write and before recording the item
        dead = services.writer.extract(ExtractRequest(samples=[SAMPLES[1]]), run_now=True).results[0].manifest
        services.runner.start()
        wait_for(lambda: services.queue.status(job.id).state == "done", 60, "the job")
        status = services.queue.status(job.id)
        stored = {m.prompt_hash: m.num_tokens for m in services.versions.find(EntryFilter())}
        assert (status.done, status.existing) == (3, 1)
        assert status.tokens == sum(stored.values()) - before.num_tokens
        assert status.tokens > dead.num_tokens > 0
        assert status.elapsed_s is not None and status.elapsed_s > 0
        assert status.tokens_per_s == status.tokens / status.elapsed_s
    finally:
        services.runner.stop()
        services.close()
