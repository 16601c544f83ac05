"""A replica with no model serves a store on a read-only volume (a real read-only mount): it starts with the catalog
opened read-only, serves verified features, and refuses every write with a clear 503."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client import FeatureClient
from schemas.api import ExtractRequest
from service.main import build_services, create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer

SAMPLE = {"text": "served from a read-only volume"}


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def read_only_store(tmp_path: Path, settings: Settings, tiny_loaded: LoadedModel) -> Iterator[Path]:
    """A store written on a tmpfs, then the tmpfs remounted read-only (as a replica's volume would be)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", str(volume))
    try:
        writer = build_services(settings.model_copy(update={"data_dir": volume}), tiny_loaded)
        writer.writer.extract(ExtractRequest(samples=[SAMPLE]))
        writer.close()
        mount("-o", "remount,ro", str(volume))
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def test_a_replica_serves_a_read_only_volume_and_refuses_writes(read_only_store: Path) -> None:
    with pytest.raises(OSError):
        (read_only_store / "probe").write_text("x")  # the volume really is read-only
    replica = Settings(data_dir=read_only_store, device="cpu")  # no model: read-only is detected
    assert replica.store_read_only
    with LiveServer(create_app(replica)) as url, FeatureClient(url) as client, httpx.Client(base_url=url) as http:
        assert http.get("/readyz").status_code == 200
        features = client.get(SAMPLE)  # verified on receipt
        assert features.full and [m.prompt_hash for m in client.entries()] == [features.manifest.prompt_hash]
        refused = http.post("/v1/extract", json={"samples": [{"text": "new"}]})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_unavailable"
        opened = http.post("/v1/window/open", json={"minutes": 30})
        assert opened.status_code == 503 and opened.json()["error"]["code"] == "read_only"
        assert "read-only" in opened.json()["error"]["message"]
        assert http.get("/healthz").status_code == 200


def test_read_only_is_refused_for_a_service_with_a_model(settings: Settings, tiny_loaded: LoadedModel) -> None:
    with pytest.raises(ValueError, match="read_only"):
        build_services(settings.model_copy(update={"read_only": True}), tiny_loaded)
