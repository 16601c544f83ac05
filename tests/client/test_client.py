from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
import torch

import client as client_package
import hsstore
import schemas
from client import (
    ConnectionFailedError,
    ConnectionLostError,
    FeatureClient,
    IntegrityError,
    InvalidRequestError,
    NotFoundError,
)
from schemas.featureset import FeatureSet
from schemas.http import BodyFormat
from tests.support.flipping_proxy import FlippingProxy


@pytest.mark.parametrize("package", [client_package, hsstore, schemas])
def test_all_is_honest(package: object) -> None:
    exported = package.__all__  # type: ignore[attr-defined]
    assert sorted(exported) == sorted(set(exported))
    for name in exported:
        assert getattr(package, name) is not None
    public = {n for n in dir(package) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(exported) | {"DEFAULT_URL"}


def test_client_never_imports_service() -> None:
    import subprocess
    import sys

    code = "import sys, client; assert not any(m == 'service' or m.startswith('service.') for m in sys.modules), 1"
    code += "; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_in_process_and_socket_transports_agree(client: FeatureClient, asgi_client: FeatureClient) -> None:
    sample = {"text": "two transports"}
    via_socket = client.extract([sample]).results[0].manifest
    via_asgi = asgi_client.get(sample)
    assert via_asgi.content_hash == via_socket.content_hash
    assert torch.equal(via_asgi.hidden_states, client.get(sample).hidden_states)


class CorruptingTransport(httpx.BaseTransport):
    """The real HTTP transport, with one bit of each feature body flipped in transit."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path.startswith("/v1/features/") and request.method == "GET":
            body = bytearray(response.read())
            body[-5] ^= 0x10
            return httpx.Response(response.status_code, headers=response.headers, stream=httpx.ByteStream(bytes(body)))
        return response


@pytest.mark.parametrize("sliced", [False, True])
def test_corruption_in_transit_raises_integrity_error(client: FeatureClient, live_url: str, sliced: bool) -> None:
    sample = {"text": "def merge_sort(items): pass"}
    client.extract([sample])
    with (
        httpx.Client(base_url=live_url, transport=CorruptingTransport()) as http,
        FeatureClient(http=http) as bad,
        pytest.raises(IntegrityError),
    ):
        bad.get(sample, layers=[1, 3] if sliced else None)


@pytest.mark.parametrize("where", [lambda n: 3, lambda n: n // 2, lambda n: n - 5], ids=["head", "middle", "end"])
@pytest.mark.parametrize("wire_format", ["chunks", "safetensors"])
def test_corruption_on_the_clients_own_socket_is_refused(
    client: FeatureClient, live_url: str, where: Callable[[int], int], wire_format: BodyFormat
) -> None:
    """The client reads feature bodies over its own sockets (not httpx): a flipped bit there is refused too."""
    sample = {"text": "def quick_sort(items): pass"}
    client.extract([sample])
    host, port = live_url.removeprefix("http://").split(":")
    proxy = FlippingProxy((host, int(port)), where)
    try:
        with FeatureClient(proxy.url, wire_format=wire_format) as bad, pytest.raises(IntegrityError):
            bad.get(sample)
    finally:
        proxy.close()


@pytest.mark.parametrize("transport", ["own sockets", "httpx"])
def test_a_response_cut_off_mid_body_is_a_typed_error_naming_what_came(
    client: FeatureClient, live_url: str, transport: str
) -> None:
    """A service that dies mid-response (here a proxy that closes the connection at a byte of the body): every read
    raises ConnectionLostError naming the bytes that came, never a parse error of the torn stream (a cut batch, which
    is chunked, once raised `invalid literal for int() with base 16: b''`)."""
    samples = [{"text": f"def cut_{i}(): return {i}"} for i in range(3)]
    keys = [r.manifest.feature_key() for r in client.extract(samples).results]
    host, port = live_url.removeprefix("http://").split(":")
    cuts = {"whole": lambda n: n // 2, "batch": lambda n: 4000}  # the batch's body has no length (chunked)
    for read, position in cuts.items():
        proxy = FlippingProxy((host, int(port)), position, cut=True)
        http = httpx.Client(base_url=proxy.url) if transport == "httpx" else None
        try:
            with FeatureClient(proxy.url, http=http) as cut, pytest.raises(ConnectionLostError) as raised:
                cut.get_batch(keys) if read == "batch" else cut.fetch(keys[0])
        finally:
            proxy.close()
        lost = raised.value
        assert f"closed mid-response after {lost.received} bytes of the body" in str(lost), str(lost)
        assert 0 < lost.received < 4000 if read == "batch" else lost.received > 0
        assert isinstance(lost, ConnectionFailedError) and lost.url == proxy.url


def test_typed_errors(client: FeatureClient) -> None:
    with pytest.raises(NotFoundError):
        client.get(prompt_hash="0" * 64)
    with pytest.raises(InvalidRequestError, match="unknown backend"):
        client.extract([{"text": "x"}], backend="tpu")
    with pytest.raises(ValueError, match="exactly one of prompt or prompt_hash"):
        client.get()
    with pytest.raises(TypeError, match="backnd"):  # the key's parts come through **: a misspelt one is refused
        client.get(prompt_hash="0" * 64, backnd="fla")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="backnd"):
        client.exists(prompt_hash="0" * 64, backnd="fla")  # type: ignore[call-arg]


def test_featureset_by_layers_or_object(client: FeatureClient) -> None:
    sample = {"text": "featureset forms"}
    by_list = client.extract([sample], featureset=["embed", 0, "final_norm"]).results[0].manifest
    assert by_list.featureset == FeatureSet(layers=["embed", 0, "final_norm"])
    features = client.get(sample, featureset=by_list.featureset_id, layers=["final_norm"])
    assert features.layers == ["final_norm"] and features.hidden_states.shape[1] == 1


def test_auth_scopes(settings, tiny_loaded) -> None:
    import hashlib

    from fastapi.testclient import TestClient

    from service.main import create_app

    # tokens as they are, or (as deploy/hsstore.example.toml has them) as sha256 digests
    w_digest = "sha256:" + hashlib.sha256(b"w").hexdigest()
    secured = settings.model_copy(update={"tokens": {"r": ["read"], w_digest: ["read", "write"]}})
    with TestClient(create_app(secured, tiny_loaded)) as http:
        assert http.post("/v1/extract", json={"samples": [{"text": "a"}]}).status_code == 401
        denied = http.post("/v1/extract", json={"samples": [{"text": "a"}]}, headers={"Authorization": "Bearer r"})
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
        ok = http.post("/v1/extract", json={"samples": [{"text": "a"}]}, headers={"Authorization": "Bearer w"})
        assert ok.status_code == 200
        assert http.get("/v1/entries", headers={"Authorization": "Bearer nope"}).status_code == 401
        digest_as_token = {"Authorization": f"Bearer {w_digest}"}  # knowing the digest is not knowing the token
        assert http.get("/v1/entries", headers=digest_as_token).status_code == 401
        assert http.get("/healthz").status_code == 200


def test_submit_job_takes_featureset_as_extract_does(client: FeatureClient) -> None:
    as_layers = client.submit_job([{"text": "def f(): pass"}], featureset=["embed", 2])
    as_object = client.submit_job([{"text": "def f(): pass"}], featureset=FeatureSet(layers=["embed", 2]))
    assert as_layers.featureset_id == as_object.featureset_id == FeatureSet(layers=["embed", 2]).id
