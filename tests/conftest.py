"""Shared fixtures: the tiny model (built once), apps over temporary stores, real uvicorn servers on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from client import FeatureClient
from service.api.connections import PROTOCOL
from service.main import create_app
from service.model.devmodel import build_devmodel
from service.model.loader import LoadedModel, load_spec, load_weights
from service.model.revision_cache import cached_model_revision
from service.settings import Settings
from tests.support.slow_writes import PAUSE_ENV

if TYPE_CHECKING:  # imported at run time as a plugin below (an earlier import would keep pytest from rewriting it)
    from tests.support.s3_server import Bucket

# the Postgres and S3-API servers', the workers', the Ray cluster's, the browser's and the windowed service's fixtures,
# for every test module
pytest_plugins = [
    "tests.support.browser",
    "tests.support.postgres_server",
    "tests.support.s3_server",
    "tests.support.workers",
    "tests.support.ray_cluster",
    "tests.support.windowed_service",
]

REPO = Path(__file__).resolve().parents[1]


CHOSEN = "TESTS_CHOSE_HSSTORE"  # which of the variables below the suite chose, not its user (not HSSTORE_*: no setting)


def pytest_configure(config: pytest.Config) -> None:
    """The suite never uses the default port, 8000, which a user's own `hsstore serve` (the README's by-hand one) may
    hold while the tests run: a `serve` started without a port, and a command given no URL, get a free one. Each of
    pytest-xdist's processes chooses its own (it inherits the first process's choice, so a choice is marked)."""
    chosen = set(filter(None, os.environ.get(CHOSEN, "").split(",")))
    for name, value in {"HSSTORE_PORT": "{}", "HSSTORE_URL": "http://127.0.0.1:{}"}.items():
        if name not in os.environ or name in chosen:
            os.environ[name] = value.format(free_port())
            chosen.add(name)
    os.environ[CHOSEN] = ",".join(sorted(chosen))


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the `ray` marks below are selected on
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests need the device; everywhere else they are reported as skipped, never silently passed. A test on
    the session's Ray cluster is marked `ray`: `make test` runs those apart, after the rest has run in parallel
    (Ray's actors want the CPUs they are given; beside other tests a read took ten times as long)."""
    import torch

    skip = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if skip is not None and "gpu" in item.keywords:
            item.add_marker(skip)
        if "local_ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)


def load_model(model_dir: Path, revision: str, device: str = "cpu") -> LoadedModel:
    """Spec and weights at once, as the service does them in two steps."""
    return load_weights(load_spec(model_dir, revision, device))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_devmodel(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def tiny_multimodal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_devmodel(tmp_path_factory.mktemp("models") / "tiny-vl", multimodal=True)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    revision = cached_model_revision(tiny_model_dir, tmp_path_factory.mktemp("rev") / "revisions.json")
    return load_model(tiny_model_dir, revision, "cpu")


@pytest.fixture
def settings(tmp_path: Path, tiny_model_dir: Path) -> Settings:
    return Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu")


@pytest.fixture
def app(settings: Settings, tiny_loaded: LoadedModel) -> FastAPI:
    return create_app(settings, tiny_loaded)


class LiveServer:
    """A real uvicorn server in a thread, on a free port of 127.0.0.1."""

    def __init__(self, app: FastAPI) -> None:
        # the protocol `hsstore serve` runs (its deadline on request heads)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", http=PROTOCOL)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def live_url(app: FastAPI) -> Iterator[str]:
    with LiveServer(app) as url:
        yield url


@pytest.fixture
def s3_url(
    bucket: Bucket, tiny_model_dir: Path, tiny_loaded: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A live service with the tiny model whose blobs are in an S3 bucket (moto's server), chunks of 16 tokens."""
    settings = bucket.service_settings(
        monkeypatch, data_dir=tmp_path / "local", model_dir=tiny_model_dir, device="cpu", chunk_tokens=16
    )
    with LiveServer(create_app(settings, tiny_loaded)) as url:
        yield url


@pytest.fixture
def client(live_url: str) -> Iterator[FeatureClient]:
    with FeatureClient(live_url) as c:
        yield c


@pytest.fixture
def http(live_url: str) -> Iterator[httpx.Client]:
    """Raw HTTP against the live server, for contract-level assertions."""
    with httpx.Client(base_url=live_url, timeout=60) as c:
        yield c


@pytest.fixture
def asgi_client(app: FastAPI) -> Iterator[FeatureClient]:
    """The same client through the in-process ASGI transport seam."""
    with TestClient(app, base_url="http://hsstore.test") as test_client, FeatureClient(http=test_client) as c:
        yield c


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`hsstore serve` in its own process, for tests that kill it."""

    def __init__(self, env: dict[str, str], port: int, module: str = "hsstore.cli", args: Sequence[str] = ()) -> None:
        self.env = {**os.environ, **env, "HSSTORE_PORT": str(port), "HSSTORE_HOST": "127.0.0.1"}
        self.module = module  # tests.support.slow_writes: the same server with slow blob writes
        self.args = list(args)
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        # a file, not a pipe: a chatty server never blocks on a full pipe; closed when the object goes
        self._log = tempfile.TemporaryFile()  # noqa: SIM115

    def output(self) -> str:
        """Everything the server printed so far (its startup lines, access log and errors)."""
        self._log.seek(0)
        return self._log.read().decode()

    def start(self, timeout: float = 90) -> ServerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "serve", *self.args],
            env=self.env,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.output()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def server_process() -> Iterator[Callable[..., ServerProcess]]:
    """`server_process(env, write_pause_s=0, args=())`: an `hsstore serve` process, stopped after the test."""
    started: list[ServerProcess] = []

    def make(env: dict[str, str], write_pause_s: float = 0.0, args: Sequence[str] = ()) -> ServerProcess:
        if write_pause_s:
            env = {**env, PAUSE_ENV: str(write_pause_s)}
        process = ServerProcess(env, free_port(), "tests.support.slow_writes" if write_pause_s else "hsstore.cli", args)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()


def wait_for(condition: Callable[[], object], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def coding_prompts() -> list[dict]:
    """The seeds' ten coding prompts, as the demo sends them."""
    from hsstore.demo_prompts import PROMPTS

    return [dict(p) for p in PROMPTS]


@pytest.fixture
def foreign_url() -> Iterator[str]:
    """Some other web server on the port a user named: HTML for everything, a 200 at /v1/info, 404 elsewhere."""

    class Foreign(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(200 if self.path.startswith("/v1/info") else 404, b"<html><h1>404 Not Found</h1></html>")

        def do_HEAD(self) -> None:
            self._answer(404, b"")

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def forward_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The tokens of every one-sequence forward any extractor runs from now on (probes included, the canary not),
    in order."""
    from service.core.write.canary import canary_ids
    from service.extraction import alone, bit_checks, extractor

    sizes: list[int] = []
    original = alone.forward_alone

    def counting(loaded: Any, seq: Any, *args: object, **kwargs: object) -> Any:
        if seq.ids != canary_ids(int(loaded.config.vocab_size)):
            sizes.append(len(seq.ids))  # not the canary, which runs once per loaded model and backend
        return original(loaded, seq, *args, **kwargs)

    for module in (extractor, bit_checks):  # the extractor's forwards and its bit checks' probes
        monkeypatch.setattr(module, "forward_alone", counting)
    return sizes
