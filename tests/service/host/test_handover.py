"""GPU hand-over with SGLang: release -> load -> extract -> unload -> resume -> healthy, also when extraction
raises; and a service killed mid-window resumes SGLang at its next start and finishes the job exactly once."""

from __future__ import annotations

import httpx
import pytest

from client import FeatureClient
from service.main import create_app
from service.settings import Settings
from tests.conftest import LiveServer, wait_for
from tests.support.windowed_service import subsequence

HANDOVER = [
    "release",
    "sglang:/release_memory_occupation",
    "load",
    "extract",
    "unload",
    "resume",
    "sglang:/resume_memory_occupation",
    "sglang:/health_generate",
    "healthy",
]


def job_status(http: httpx.Client, job_id: str) -> dict:
    return http.get(f"/v1/jobs/{job_id}").json()


def test_release_load_extract_unload_resume_healthy(windowed_settings: Settings, events, standin) -> None:
    app = create_app(windowed_settings, on_event=events.append)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/window/open", json={"minutes": 10}).json()["open"]
        job = http.post("/v1/jobs", json={"samples": [{"text": f"warm {i}"} for i in range(3)]}).json()
        wait_for(lambda: job_status(http, job["id"])["state"] == "done", what="job done")
        assert http.post("/v1/window/close").json()["open"] is False
        wait_for(lambda: "healthy" in events, what="SGLang healthy again")
        assert not standin[0].released
    assert subsequence(list(events), HANDOVER), list(events)
    assert events.count("load") == 1 and events.count("unload") == 1


def test_the_gpu_goes_back_when_extraction_raises(windowed_settings: Settings, events, standin) -> None:
    app = create_app(windowed_settings, on_event=events.append)
    models = app.state.services.models

    class Exploding:
        def extract_many(self, *args, **kwargs):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        extract = extract_many  # the canary's extraction (first after a load) fails the same way

    models.make_extractor = lambda loaded: Exploding()
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        http.post("/v1/window/open", json={"minutes": 10})
        job = http.post("/v1/jobs", json={"samples": [{"text": "boom"}]}).json()
        wait_for(lambda: job_status(http, job["id"])["state"] == "failed", timeout=90, what="job failed")
        status = job_status(http, job["id"])
        assert "illegal memory access" in status["error"] and status["pending"] == 1
        assert not standin[0].released and not models.loaded
    assert subsequence(list(events), HANDOVER), list(events)
    assert events.count("load") == events.count("unload") == events.count("healthy") == 3  # three tries


def test_sigkill_mid_window_resumes_sglang_and_completes(
    windowed_settings: Settings, events, standin, server_process
) -> None:
    env = {
        "HSSTORE_DATA_DIR": str(windowed_settings.data_dir),
        "HSSTORE_MODEL_DIR": str(windowed_settings.model_dir),
        "HSSTORE_DEVICE": "cpu",
        "HSSTORE_HANDOVER": "memory_saver",
        "HSSTORE_SGLANG_URL": standin[1],
        "HSSTORE_JOB_BATCH_SIZE": "2",
    }
    samples = [{"id": f"k{i}", "text": f"def task_{i}(): return {i}"} for i in range(8)]
    first = server_process(env, write_pause_s=0.5).start()
    with httpx.Client(base_url=first.url, timeout=60) as http:
        http.post("/v1/window/open", json={"minutes": 30})
        job = http.post("/v1/jobs", json={"samples": samples}).json()
        wait_for(lambda: job_status(http, job["id"])["done"] >= 2, what="first batch")
    assert standin[0].released
    first.kill()  # mid-window, holding the GPU, with a batch in flight
    assert standin[0].released
    killed_at = len(events)

    second = server_process(env).start()
    wait_for(lambda: "sglang:/resume_memory_occupation" in events[killed_at:], what="resume after restart")
    with httpx.Client(base_url=second.url, timeout=60) as http:
        wait_for(lambda: job_status(http, job["id"])["state"] == "done", timeout=120, what="job done")
        status = job_status(http, job["id"])
        assert (status["done"], status["failed"], status["pending"]) == (8, 0, 0)
        http.post("/v1/window/close")
        wait_for(lambda: not standin[0].released, what="SGLang resumed after the window")
        with FeatureClient(second.url) as client:
            stored = list(client.entries())
        assert len(stored) == 8 and len({m.prompt_hash for m in stored}) == 8  # every sample, exactly once
        for sample in samples:
            assert FeatureClient(second.url).exists(sample)
    after = list(events)[killed_at:]
    assert after.index("sglang:/resume_memory_occupation") < after.index("sglang:/release_memory_occupation")


def test_operator_commands_handover(tmp_path, standin) -> None:
    from service.host.handover import CommandHandover, HandoverFailed

    log = tmp_path / "ops.log"
    handover = CommandHandover(f"sh -c 'echo stop >> {log}'", f"sh -c 'echo start >> {log}'", standin[1], 10)
    handover.release()
    handover.resume()  # runs the start command, then polls SGLang's /health
    assert log.read_text().split() == ["stop", "start"]
    assert standin[0].log[-1] == "sglang:/health"
    with pytest.raises(HandoverFailed, match="exited 3"):
        CommandHandover("sh -c 'exit 3'", "true", standin[1], 10).release()


def test_an_sglang_that_comes_back_wrong_is_reported(windowed_settings: Settings, events, standin) -> None:
    """Its greedy canary before the release and after the resume differ: the window status and the metrics say so."""
    server, _ = standin
    app = create_app(windowed_settings, on_event=events.append)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        for broken, verdict in ((False, "ok"), (True, "mismatch")):
            server.broken_by_resume = broken
            events.clear()
            http.post("/v1/window/open", json={"minutes": 10})
            job = http.post("/v1/jobs", json={"samples": [{"text": f"warm {broken}"}]}).json()
            wait_for(lambda job=job: job_status(http, job["id"])["state"] == "done", what="job done")
            http.post("/v1/window/close")
            wait_for(lambda: "healthy" in events, what="SGLang healthy again")
            assert http.get("/v1/window").json()["sglang_canary"] == verdict
        metrics = http.get("/metrics").text
        assert "hsstore_sglang_canary_mismatches_total 1.0" in metrics


@pytest.mark.parametrize(("wrong_answers", "verdict"), [(1, "restarted"), (2, "mismatch")])
def test_a_command_handover_restarts_an_sglang_that_comes_back_wrong(
    tmp_path, standin, wrong_answers: int, verdict: str
) -> None:
    from service.host.handover import CommandHandover
    from service.host.sglang import SGLangClient
    from service.host.sglang_canary import CheckedHandover

    server, url = standin
    log = tmp_path / "ops.log"
    mismatches: list[int] = []
    inner = CommandHandover(f"sh -c 'echo stop >> {log}'", f"sh -c 'echo start >> {log}'", url, 10)
    handover = CheckedHandover(inner, SGLangClient(url, 30), lambda: mismatches.append(1))
    handover.release()  # asks the canary first
    server.wrong_answers = wrong_answers  # its weights came back broken; a restart loads them afresh
    handover.resume()
    assert log.read_text().split() == ["stop", "start", "stop", "start"]
    assert (handover.state, mismatches) == (verdict, [1])
