"""A mode that cannot run is said where operators look, and what is stored names what ran (#61).

Forced on any host: packs on the CPU, and layers "replayed" by a stand-in recorder (tests/support/rerun_recorder.py)
whose every recording fails, as a CUDA graph's capture that ran out of memory did on an H100. The entries' fingerprint
then says `cuda_graphs: false` (every layer ran eagerly), `/v1/info`'s `run` says eager and why under `degraded`,
`/metrics` has `hsstore_degraded{mode="cuda_graphs"} 1`, and `hsstore health` prints it and exits 1. With a recorder
that works, the same requests store `cuda_graphs: true` and nothing is degraded. The layer mode that runs, and the
reason, are the ones the composition root chose (here: forced replays)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import service.main as main_module
from hsstore.cli import app as cli
from schemas.device_run import LayerMode
from service.extraction import extractor as extractor_module
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer
from tests.support.rerun_recorder import RerunRecorder

SAMPLES = [{"text": "a sample that shares a pack"}, {"text": "and one more beside it, a little longer"}]


@pytest.fixture
def replaying_server(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, tiny_loaded: LoadedModel, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A live service whose packs run on the CPU with layers replayed by `request.param`'s recorder."""
    fail: bool = request.param
    monkeypatch.setattr(extractor_module, "PACKING_DEVICES", frozenset({"cuda", "cpu"}))
    monkeypatch.setattr(main_module, "layer_mode", lambda *_: (LayerMode.REPLAYED, "forced by the test"))
    monkeypatch.setattr(main_module, "graph_recorder", lambda *_: RerunRecorder(fail=fail))
    app = create_app(settings.model_copy(update={"pack_tokens": 256}), tiny_loaded)
    with LiveServer(app) as url:
        yield url


def _extracted(url: str) -> list[dict[str, Any]]:
    response = httpx.post(f"{url}/v1/extract", json={"samples": SAMPLES, "force": True}, timeout=120)
    assert response.status_code == 200, response.text
    return [r["manifest"]["fingerprint"] for r in response.json()["results"]]


@pytest.mark.parametrize("replaying_server", [True], indirect=True)
def test_a_recording_that_fails_is_named_in_the_key_info_metrics_and_health(replaying_server: str) -> None:
    url = replaying_server
    fingerprints = _extracted(url)
    assert {f["cuda_graphs"] for f in fingerprints} == {False}  # what ran: every layer eagerly
    assert {f["batching"].startswith("own-rows packs of 256") for f in fingerprints} == {True}
    run = httpx.get(f"{url}/v1/info").json()["run"]
    assert run["layer_mode"] == "eager" and run["layer_mode_reason"] == "forced by the test"
    assert "recording layer" in run["degraded"]["cuda_graphs"] and "eagerly" in run["degraded"]["cuda_graphs"]
    assert run["memory"] is None  # the CPU's memory is not planned
    metrics = httpx.get(f"{url}/metrics").text
    assert 'hsstore_degraded{mode="cuda_graphs"} 1.0' in metrics
    printed = CliRunner().invoke(cli, ["health", "--url", url])
    assert printed.exit_code == 1 and "degraded cuda_graphs: recording layer" in printed.output, printed.output
    assert {f["cuda_graphs"] for f in _extracted(url)} == {False}  # and stays so: no recording is tried again


@pytest.mark.parametrize("replaying_server", [False], indirect=True)
def test_replays_that_run_are_named_and_nothing_is_degraded(replaying_server: str) -> None:
    url = replaying_server
    assert {f["cuda_graphs"] for f in _extracted(url)} == {True}
    run = httpx.get(f"{url}/v1/info").json()["run"]
    assert run["layer_mode"] == "replayed" and run["degraded"] == {}
    assert "hsstore_degraded{" not in httpx.get(f"{url}/metrics").text
