"""What a new user met on a fresh clone and an operator on the first day: Ctrl-C and SIGTERM that say what was
stored, admin verbs that refuse a path without a store, URLs as people type them, `--debug` anywhere, a busy port
named before anything loads, and window verbs that agree with each other."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from client import ConnectionFailedError
from hsstore.cli import app
from schemas.prompt_hash import prompt_hash
from tests.conftest import REPO, coding_prompts, free_port, wait_for
from tests.hsstore.cli.test_cli_first_hour import failed, invoke, ok, write_jsonl


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "prompts.jsonl", [json.dumps(p) for p in coding_prompts()[:3]])


def _default_sigint() -> None:
    """Ctrl-C as a terminal delivers it, whatever the runner's own disposition (a suite started from a background
    shell has SIGINT ignored, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hsstore.cli", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        preexec_fn=_default_sigint,
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_extract_says_what_was_stored_and_that_the_service_finishes_its_request(
    server_process, tiny_model_dir: Path, tmp_path: Path, signum: int
) -> None:
    env = {"HSSTORE_MODEL_DIR": str(tiny_model_dir), "HSSTORE_DATA_DIR": str(tmp_path / "d"), "HSSTORE_DEVICE": "cpu"}
    server = server_process(env, write_pause_s=0.3).start()  # slow writes: the command is mid-way when stopped
    samples = [{"text": f"def f{i}(x): return x * {i}"} for i in range(12)]
    jsonl = write_jsonl(tmp_path / "p.jsonl", [json.dumps(s) for s in samples])
    command = _cli("extract", str(jsonl), "--url", server.url, "--batch", "2")
    assert command.stdout is not None
    while not command.stdout.readline().startswith("extracted"):  # the first request's results are out
        assert command.poll() is None, command.stderr.read() if command.stderr else ""
    time.sleep(0.2)  # the second request is out, and takes >= 0.6 s on the service (two paused blob writes)
    command.send_signal(signum)
    _, stderr = command.communicate(timeout=60)
    assert command.returncode == 130, stderr
    said = " ".join(stderr.split())
    found = re.search(r"interrupted: (\d+) of 12 samples stored \(to line (\d+)\); the service finishes", said)
    assert found and int(found[1]) >= 2 and found[1] == found[2], said
    assert "the request it holds (2 more samples) and stores them too" in said
    since = re.search(r"hsstore entries --since (\S+);", said)
    assert since and "running the command again skips it" in said
    stored = int(found[1])

    def listed() -> int:
        page = httpx.get(f"{server.url}/v1/entries", params={"since": since[1], "limit": 100}).json()
        return len(page["entries"])

    wait_for(lambda: listed() >= stored + 2, timeout=30, what="the request in flight to be stored")
    assert listed() == stored + 2  # what it said, and nothing half-done: the listing it named shows exactly that


def test_an_interrupted_warm_says_the_job_goes_on_and_how_to_stop_it(
    server_process, tiny_model_dir: Path, tmp_path: Path, prompts: Path
) -> None:
    later = datetime.now(UTC) + timedelta(hours=12)  # a window that is shut now: the job waits
    window = f"Mon-Sun {later:%H}:00-{later:%H}:30 UTC"
    env = {
        "HSSTORE_MODEL_DIR": str(tiny_model_dir),
        "HSSTORE_DATA_DIR": str(tmp_path / "d"),
        "HSSTORE_DEVICE": "cpu",
        "HSSTORE_WINDOWS": json.dumps([window]),
    }
    server = server_process(env).start()
    command = _cli("warm", str(prompts), "--url", server.url, "--backend", "torch")
    assert command.stdout is not None
    job_line = command.stdout.readline()
    job_id = re.match(r"job ([0-9a-f]{32}):", job_line)
    assert job_id, job_line
    command.send_signal(signal.SIGINT)
    _, stderr = command.communicate(timeout=60)
    assert command.returncode == 130, stderr
    said = " ".join(stderr.split())
    assert f"stopped following job {job_id[1]}: it goes on in the service (0/3 done so far)" in said
    assert f"stop it: hsstore jobs cancel {job_id[1]}" in said
    cancelled = ok("jobs", "cancel", job_id[1], "--url", server.url)  # and what it said works
    assert httpx.get(f"{server.url}/v1/jobs/{job_id[1]}").json()["state"] == "cancelled", cancelled


@pytest.mark.parametrize("verb", ["verify", "rebuild-catalog"])
def test_admin_verbs_refuse_a_path_without_a_store_and_create_nothing(tmp_path: Path, verb: str) -> None:
    missing = tmp_path / "no" / "such"
    first, hint = failed(verb, str(missing))
    assert str(missing) in first and "holds no hsstore store" in first and "HSSTORE_DATA_DIR" in hint
    assert not (tmp_path / "no").exists()
    (tmp_path / "empty").mkdir()
    failed(verb, str(tmp_path / "empty"))
    assert not any((tmp_path / "empty").iterdir())


def test_a_read_for_a_backend_a_prompt_lacks_passes_on_which_backends_it_has(live_url: str, prompts: Path) -> None:
    ok("extract", str(prompts), "--url", live_url)
    key = prompt_hash(coding_prompts()[0])
    (first, *_) = failed("get", key[:10], "--backend", "fla", "--url", live_url)
    assert "backend=fla" in first and "stored: backend=torch" in first


def test_urls_as_people_type_them(live_url: str) -> None:
    assert "no entries" in invoke("entries", "--url", live_url.removeprefix("http://")).output  # host:port
    for wrong in (f"{live_url}/v1", f"{live_url}/v1/", "ftp://127.0.0.1:1"):
        first, hint = failed("entries", "--url", wrong)
        assert "is not a service's base URL" in first and "http://HOST:PORT" in hint


def test_debug_is_taken_anywhere_on_the_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (
        ["--debug", "entries", "--url", url],
        ["entries", "--debug", "--url", url],
        ["entries", "--url", url, "--debug"],
    ):
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, ConnectionFailedError), (args, result.output)  # the traceback, not a line


def test_window_open_and_close_agree_on_a_service_that_always_has_the_gpu(live_url: str) -> None:
    for verb in (["open", "--minutes", "30"], ["close"]):
        result = invoke("window", *verb, "--url", live_url)
        assert result.exit_code == 0, result.output
        assert f"nothing to {verb[0]}" in result.stderr and "always its own" in result.stderr


def test_serve_on_a_busy_port_says_so_in_one_line_before_loading_anything(tiny_model_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "hsstore.cli", "serve", "--port", str(port), "--host", "127.0.0.1"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                "HSSTORE_MODEL_DIR": str(tiny_model_dir),
                "HSSTORE_DATA_DIR": str(tmp_path / "d"),
            },
        )
    assert done.returncode == 1 and "listening" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0] == f"error: cannot listen on 127.0.0.1:{port}: Address already in use", lines
    assert "--port" in lines[1] and len(lines) == 2


@pytest.mark.parametrize("verb", ["worker", "serve"])
def test_a_start_that_fails_says_one_line_and_nothing_before_it(
    verb: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A worker or service given a catalog nobody answers prints its one error line and nothing else (the heap's
    setting, logged at start, comes only once the catalog and the store opened: a cluster check reads this line)."""
    done = subprocess.run(
        [sys.executable, "-m", "hsstore.cli", verb, "--model-dir", str(tiny_model_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "HSSTORE_DATA_DIR": str(tmp_path / "d"),
            "HSSTORE_DEVICE": "cpu",
            "HSSTORE_CATALOG_URL": "postgresql://127.0.0.1:1/nothing",
        },
    )
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1 and len(said) == 1, said
    assert said[0].startswith("error: the catalog at postgresql://127.0.0.1:1/nothing cannot be reached"), said


def test_workers_lists_who_holds_which_items_until_when(settings, tiny_loaded, tmp_path: Path, prompts: Path) -> None:
    from service.main import create_app
    from tests.conftest import LiveServer

    later = datetime.now(UTC) + timedelta(hours=12)
    windowed = create_app(
        settings.model_copy(update={"windows": [f"Mon-Sun {later:%H}:00-{later:%H}:30 UTC"]}), tiny_loaded
    )
    with LiveServer(windowed) as url:
        assert "no worker holds a lease now" in invoke("workers", "--url", url).stderr
        submitted = ok("warm", str(prompts), "--url", url, "--no-wait")  # "job <id>: 3 items ..."
        job = submitted.split(":", 1)[0].removeprefix("job ")
        windowed.state.services.queue.jobs.claim_items(job, "gpu-host-7:cuda:3", 2, lease_s=600)  # as a worker's claim
        listed = ok("workers", "--url", url)
        assert "gpu-host-7:cuda:3" in listed and job[:10] in listed and " 2 " in listed
        (lease,) = json.loads(ok("workers", "--url", url, "--json"))
        assert (lease["worker"], lease["job_id"], lease["items"]) == ("gpu-host-7:cuda:3", job, 2)
        assert 590 < lease["expires_in_s"] <= 600


def test_a_service_beyond_loopback_without_tokens_refuses_to_start_unless_told(settings, tiny_loaded) -> None:
    from service.core.startup import startup_lines
    from service.errors import ConfigError
    from service.main import build_services, create_app

    exposed = settings.model_copy(update={"host": "0.0.0.0"})
    with pytest.raises(ConfigError, match=r"refusing to serve 0\.0\.0\.0 without auth.*HSSTORE_ALLOW_ANONYMOUS"):
        create_app(exposed, tiny_loaded)
    for fine in ({"tokens": {"sha256:" + "ab" * 32: ["read"]}}, {"allow_anonymous": True}, {"host": "::1"}):
        create_app(exposed.model_copy(update=fine), tiny_loaded)
    told = build_services(exposed.model_copy(update={"allow_anonymous": True}), tiny_loaded)
    assert "auth: off (no tokens configured, allow_anonymous: whoever reaches this port can read and write)" in (
        startup_lines(told.settings, told.models, told.store, told.windows)
    )
    told.close()


def test_a_worker_takes_its_device_from_the_settings(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`hsstore worker` without --device runs where HSSTORE_DEVICE says (the option no longer overrides it)."""
    log = tmp_path / "worker.log"
    env = {**os.environ, "HSSTORE_DEVICE": "cpu", "HSSTORE_MODEL_DIR": str(tiny_model_dir)}
    env["HSSTORE_DATA_DIR"] = str(tmp_path / "store")
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "hsstore.cli", "worker"], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            wait_for(lambda: "hsstore worker" in log.read_text() or worker.poll() is not None, 120, "the start line")
            assert re.search(r"hsstore worker \S+:cpu on cpu:", log.read_text()), log.read_text()[-2000:]
        finally:
            worker.terminate()
            worker.wait(timeout=30)
