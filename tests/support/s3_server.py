"""A real S3-API HTTP server for tests: moto in server mode on 127.0.0.1 (started once per session), a fresh bucket
per test. Its credentials are moto's defaults: it checks none."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from service.settings import Settings

REGION = "us-east-1"
KEYS = {"access_key_id": "testing", "secret_access_key": "testing"}


@dataclass(frozen=True)
class Bucket:
    endpoint: str
    name: str

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def env(self) -> dict[str, str]:
        """What a service process needs to reach it (as `hsstore serve` reads them)."""
        return {
            "HSSTORE_STORE_URL": self.url,
            "HSSTORE_S3_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": KEYS["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": KEYS["secret_access_key"],
            "AWS_REGION": REGION,
        }

    def service_settings(self, monkeypatch: pytest.MonkeyPatch, **fields: Any) -> Settings:
        """Settings of an in-process service whose blobs are in this bucket under `features/` (its credentials in
        the environment, where obstore reads them), with `fields` besides."""
        from service.settings import Settings

        for name, value in self.env().items():
            monkeypatch.setenv(name, value)
        return Settings(store_url=f"{self.url}/features", s3_endpoint=self.endpoint, **fields)

    def obstore(self, prefix: str | None = None):
        from obstore.store import S3Store

        return S3Store(
            self.name, prefix=prefix, endpoint=self.endpoint, region=REGION, client_options={"allow_http": True}, **KEYS
        )


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer  # here, not at import: the GPU machine runs tests without moto

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def create_bucket(endpoint: str, name: str | None = None) -> Bucket:
    """A new bucket on the S3-API server at `endpoint` (a fresh name unless given)."""
    import boto3

    bucket = Bucket(endpoint, name or f"hsstore-{uuid.uuid4().hex[:12]}")
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=KEYS["access_key_id"],
        aws_secret_access_key=KEYS["secret_access_key"],
    )
    client.create_bucket(Bucket=bucket.name)
    return bucket


@pytest.fixture
def bucket(moto_endpoint: str) -> Bucket:
    return create_bucket(moto_endpoint)
