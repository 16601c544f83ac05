"""A dead object store is an outage, never corruption: with the S3-API server stopped, full reads, parts, batches
and direct-read locations answer 503 `store_unavailable` with Retry-After within seconds; the client raises its
retriable error, the training loaders wait it out, nothing is marked corrupt, and reads work again once the store
is back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client import FeatureClient, FeatureDataset, IntegrityError, StoreUnavailableError
from schemas.featureset import FeatureSet
from service.main import create_app
from tests.conftest import LiveServer, coding_prompts, free_port
from tests.support.s3_server import create_bucket


class StoppableS3:
    """moto's S3 server of our own on a fixed port, stopped and started again by the test (its buckets live in
    the process, so they are there again after a restart)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.stop()


@pytest.fixture
def s3() -> Iterator[StoppableS3]:
    server = StoppableS3()
    server.start()
    yield server
    server.stop()


def test_a_dead_object_store_is_a_503_the_client_retries_and_never_corrupt(
    s3: StoppableS3, tiny_model_dir: Path, tiny_loaded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = f"http://127.0.0.1:{s3.port}"
    bucket = create_bucket(endpoint, "outage")
    settings = bucket.service_settings(monkeypatch, data_dir=tmp_path / "d", model_dir=tiny_model_dir, device="cpu")
    sample = coding_prompts()[0]
    featureset = FeatureSet(layers=[1, 3])
    with LiveServer(create_app(settings, tiny_loaded)) as url, FeatureClient(url) as client:
        manifest = client.extract([sample], featureset=featureset).results[0].manifest
        key = {"prompt_hash": manifest.prompt_hash}
        s3.stop()
        started = time.monotonic()
        for method, path, body in (
            ("GET", f"/v1/features/{manifest.prompt_hash}", None),
            ("GET", f"/v1/features/{manifest.prompt_hash}?layers=1&tokens=0:8", None),
            ("POST", "/v1/features:locate", {"keys": [key]}),
        ):
            answer = httpx.request(method, f"{url}{path}", json=body, timeout=60)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.json()["error"]["code"] == "store_unavailable" and answer.headers["Retry-After"] == "5"
        assert time.monotonic() - started < 45  # seconds, not obstore's default minutes of retries
        with pytest.raises(StoreUnavailableError) as raised:
            client.get(sample, featureset=featureset)
        assert not isinstance(raised.value, IntegrityError)
        (listed,) = client.entries()
        assert listed.integrity is None  # nothing was marked corrupt

        threading.Timer(1.5, s3.start).start()  # the store comes back while the loader waits
        dataset = FeatureDataset(url, [manifest])
        assert dataset[0]["content_hash"] == manifest.content_hash
        assert client.get(sample, featureset=featureset).manifest.content_hash == manifest.content_hash
