"""SIGKILL the server in the middle of a blob write: after a restart nothing partial is visible and the write redoes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from client import FeatureClient
from schemas.api import ExtractRequest
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import ServerProcess, wait_for

SAMPLE = {"id": "crash", "text": "def lru_cache(capacity):\n    return OrderedDict()"}


def test_sigkill_mid_write_leaves_nothing_partial(
    tmp_path: Path,
    tiny_model_dir: Path,
    tiny_loaded: LoadedModel,
    server_process: Callable[[dict[str, str]], ServerProcess],
) -> None:
    data_dir = tmp_path / "store"
    env = {"HSSTORE_DATA_DIR": str(data_dir), "HSSTORE_MODEL_DIR": str(tiny_model_dir), "HSSTORE_DEVICE": "cpu"}
    server = server_process(env, write_pause_s=60).start()

    errors: list[Exception] = []

    def send() -> None:
        try:
            httpx.post(f"{server.url}/v1/extract", json={"samples": [SAMPLE]}, timeout=120)
        except httpx.HTTPError as exc:
            errors.append(exc)

    request = threading.Thread(target=send)
    request.start()
    staging = data_dir / "tmp"
    # the first array of the blob is on disk in the staging area, the rest is not written yet
    wait_for(lambda: any(p.name == "zarr.json" and p.parent.name == "hidden_states" for p in staging.rglob("*")))
    server.kill()
    request.join(timeout=30)
    assert errors, "the request should have died with the server"

    restarted = server_process(env).start()
    assert not any((data_dir / "blobs").rglob("*.json")), "a partial blob became visible"
    assert not any(staging.iterdir()), "the dead writer's staging area was not swept"
    with FeatureClient(restarted.url) as client:
        assert not client.exists(SAMPLE)
        assert list(client.entries()) == []
        redone = client.extract([SAMPLE]).results[0]
        assert redone.status == "extracted"
        fetched = client.get(SAMPLE)

    reference = build_services(Settings(data_dir=tmp_path / "reference", device="cpu"), tiny_loaded)
    expected = reference.writer.extract(ExtractRequest(samples=[SAMPLE])).results[0].manifest.content_hash
    assert redone.manifest.content_hash == fetched.content_hash == expected
