"""Jobs wait for windows, run when one opens, stop at a batch boundary when it closes; reference completions come
from SGLang before the window; bad submissions are refused whole; the model loads on demand and unloads when idle."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from client import FeatureClient
from schemas.job_api import JobOptions
from service.core.write import prepare
from service.errors import InvalidSample
from service.main import build_services, create_app
from service.model import loader
from service.settings import Settings
from tests.conftest import LiveServer, wait_for
from tests.support.slow_writes import slow_writes


def status(http: httpx.Client, job_id: str) -> dict:
    return http.get(f"/v1/jobs/{job_id}").json()


def test_job_waits_runs_in_window_and_stops_at_a_batch_boundary(windowed_settings: Settings, events, standin) -> None:
    samples = [{"text": f"def step_{i}(): pass"} for i in range(10)]
    app = create_app(windowed_settings, on_event=events.append)
    with slow_writes(0.3), LiveServer(app) as url, httpx.Client(base_url=url) as http:
        job = http.post("/v1/jobs", json={"samples": samples}).json()
        time.sleep(1.0)
        waiting = status(http, job["id"])
        assert waiting["state"] == "queued" and waiting["done"] == 0 and waiting["waiting_for_window"]
        assert "load" not in events and not standin[0].released
        # an extract request outside the window is refused too
        refused = http.post("/v1/extract", json={"samples": [{"text": "now?"}]})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "window_closed"

        http.post("/v1/window/open", json={"minutes": 10})
        wait_for(lambda: status(http, job["id"])["done"] >= 2, what="first batch")
        http.post("/v1/window/close")
        wait_for(lambda: "healthy" in events, what="GPU handed back")
        stopped = status(http, job["id"])
        # every item done or waiting, none half-done (batches shrink as a job drains, so no fixed multiple)
        assert 0 < stopped["done"] < 10 and stopped["pending"] == 10 - stopped["done"] and stopped["failed"] == 0
        # what is left waits for the next window, and says so: not "running"
        assert stopped["state"] == "queued" and stopped["waiting_for_window"]
        time.sleep(1.0)
        assert status(http, job["id"])["done"] == stopped["done"]  # nothing more outside the window

        http.post("/v1/window/open", json={"minutes": 10})
        wait_for(lambda: status(http, job["id"])["state"] == "done", what="job done")
        final = status(http, job["id"])
        assert final["done"] == 10 and final["tokens"] > 0 and final["tokens_per_s"] > 0


def test_reference_completions_come_from_sglang_before_the_window(windowed_settings: Settings, events, standin) -> None:
    with LiveServer(create_app(windowed_settings, on_event=events.append)) as url, httpx.Client(base_url=url) as http:
        job = http.post(
            "/v1/jobs",
            json={
                "samples": [{"messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)],
                "completion": "greedy:6",
                "backends": ["torch"],
            },
        ).json()
        wait_for(lambda: status(http, job["id"])["completions_fetched"] == 3, what="completions fetched")
        assert "sglang:/release_memory_occupation" not in events
        http.post("/v1/window/open", json={"minutes": 10})
        wait_for(lambda: status(http, job["id"])["state"] == "done", what="job done")
        with FeatureClient(url) as client:
            manifests = list(client.entries())
            assert len(manifests) == 3
            for manifest in manifests:
                assert manifest.completion_source == "greedy:sglang" and manifest.completion_tokens > 0
                assert manifest.sample["completion"] == {"greedy": {"max_new_tokens": 6}}
                features = client.get(prompt_hash=manifest.prompt_hash)
                assert features.loss_mask.sum().item() == manifest.completion_tokens
            audit = client.audit(3)  # re-extracts over SGLang's tokens, which are not asked for again
            assert (audit.total, audit.reproduced) == (3, 3)
    assert events.index("sglang:/generate") < events.index("sglang:/release_memory_occupation")


def test_greedy_falls_back_to_the_target_without_sglang(settings: Settings, tiny_loaded) -> None:
    with LiveServer(create_app(settings, tiny_loaded)) as url, httpx.Client(base_url=url) as http:
        job = http.post("/v1/jobs", json={"samples": [{"text": "fallback"}], "completion": "greedy:4"}).json()
        wait_for(lambda: status(http, job["id"])["state"] == "done", what="job done")
        (manifest,) = FeatureClient(url).entries()
        assert manifest.completion_source == "greedy:target"


def test_jsonl_upload_several_backends_cancel_and_errors(settings: Settings, tiny_loaded) -> None:
    settings = settings.model_copy(update={"job_batch_size": 1})
    jsonl = "\n".join(f'{{"id": "j{i}", "text": "line {i}"}}' for i in range(6)).encode()
    app = create_app(settings, tiny_loaded)
    with slow_writes(0.2), LiveServer(app) as url, httpx.Client(base_url=url) as http:
        job = http.post(
            "/v1/jobs",
            content=jsonl,
            params={"backend": ["torch"], "layers": "1,2", "priority": 3},
            headers={"content-type": "application/x-ndjson"},
        )
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        assert job.json()["total"] == 6 and job.json()["priority"] == 3
        wait_for(lambda: status(http, job_id)["done"] >= 1, what="started")
        cancelled = http.post(f"/v1/jobs/{job_id}/cancel").json()
        assert cancelled["state"] == "cancelled"
        time.sleep(0.8)
        assert status(http, job_id)["done"] < 6
        assert [j["id"] for j in http.get("/v1/jobs").json()["jobs"]] == [job_id]

        # bad input: refused whole, nothing created
        bad = [
            (b'{"text": "ok"}\n{not json', {"content-type": "application/x-ndjson"}, "line 2"),
            (b'{"text": "ok"}\n{"text": ""}', {"content-type": "application/x-ndjson"}, "samples[1]"),
            (b'{"samples": [{"text": "x"}], "backends": ["fla"]}', {"content-type": "application/json"}, "fla"),
            (b'{"samples": [{"text": "x"}], "completion": "beam:4"}', {"content-type": "application/json"}, "greedy"),
            (b'{"samples": [{"text": "x"}], "featureset": {"layers": [99]}}', {}, "out of range"),
            (b"\xff\xfe", {"content-type": "application/x-ndjson"}, "UTF-8"),
        ]
        for body, headers, word in bad:
            response = http.post("/v1/jobs", content=body, headers=headers)
            assert 400 <= response.status_code < 500, (body, response.text)
            assert word in response.json()["error"]["message"], response.text
        assert len(http.get("/v1/jobs").json()["jobs"]) == 1
        assert http.get("/v1/jobs/nope").status_code == 404


def test_each_sample_of_a_job_is_parsed_and_tokenised_once(
    settings: Settings, tiny_loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's samples are prepared in one pass and spooled to disk until the job is inserted (#63: a 10^6-sample
    job was parsed twice); a bad sample at the end still leaves no job."""
    parsed, tokenised = Counter[int](), Counter[str]()
    parse, encode_many = prepare.parse_sample, loader.encode_many
    monkeypatch.setattr(
        prepare, "parse_sample", lambda sample, index=None: (parsed.update([index]), parse(sample, index))[1]
    )

    def counted(batch: list, *args: object) -> list:
        tokenised.update(p.prompt_hash for p in batch)
        return encode_many(batch, *args)

    monkeypatch.setattr(loader, "encode_many", counted)
    made = build_services(settings, tiny_loaded)
    samples = [{"text": f"sample {i}"} for i in range(2500)]
    job = made.queue.submit_samples(JobOptions(backends=["torch"]), iter(samples))  # an iterator: read once
    assert job.total == 2500 and made.queue.status(job.id).pending == 2500
    assert set(parsed.values()) == {1} and len(parsed) == 2500
    assert set(tokenised.values()) == {1} and len(tokenised) == 2500
    with pytest.raises(InvalidSample, match=r"samples\[2500\]"):
        made.queue.submit_samples(JobOptions(backends=["torch"]), iter([*samples, {"text": ""}]))
    assert [j.id for j in made.queue.list().jobs] == [job.id]
    made.close()


def test_run_now_needs_admin(settings: Settings, tiny_loaded) -> None:
    secured = settings.model_copy(update={"tokens": {"w": ["read", "write"], "a": ["admin"]}})
    with LiveServer(create_app(secured, tiny_loaded)) as url, httpx.Client(base_url=url) as http:
        body = {"samples": [{"text": "urgent"}], "run_now": True}
        assert http.post("/v1/jobs", json=body, headers={"Authorization": "Bearer w"}).status_code == 403
        assert http.post("/v1/jobs", json=body, headers={"Authorization": "Bearer a"}).status_code == 201
        assert (
            http.post("/v1/window/open", json={"minutes": 1}, headers={"Authorization": "Bearer w"}).status_code == 403
        )


def test_model_loads_on_demand_and_unloads_when_idle(tmp_path: Path, tiny_model_dir: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "s", model_dir=tiny_model_dir, device="cpu", load_on_start=False, idle_unload_s=0.5
    )
    with LiveServer(create_app(settings)) as url, httpx.Client(base_url=url) as http:
        assert http.get("/v1/info").json()["window"]["model_loaded"] is False
        assert http.get("/v1/info").json()["model"]["num_layers"] == 8  # known without the weights
        assert http.post("/v1/extract", json={"samples": [{"text": "wake up"}]}).status_code == 200
        assert http.get("/v1/info").json()["window"]["model_loaded"] is True
        wait_for(lambda: not http.get("/v1/info").json()["window"]["model_loaded"], what="idle unload")


def test_replica_without_model_refuses_jobs(tmp_path: Path) -> None:
    with LiveServer(create_app(Settings(data_dir=tmp_path / "r"))) as url, httpx.Client(base_url=url) as http:
        refused = http.post("/v1/jobs", json={"samples": [{"text": "x"}]})
        assert refused.status_code == 503 and "no model" in refused.json()["error"]["message"]


def test_a_window_shorter_than_the_hand_back_margin_is_refused(windowed_settings: Settings, standin) -> None:
    with LiveServer(create_app(windowed_settings)) as url, httpx.Client(base_url=url) as http:
        refused = http.post("/v1/window/open", json={"minutes": 2})  # the margin is 300 s
        assert refused.status_code == 422 and "margin" in refused.json()["error"]["message"]
        assert http.get("/v1/window").json()["open"] is False
        assert http.post("/v1/window/open", json={"minutes": -1}).status_code == 422
