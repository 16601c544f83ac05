"""The Python client and the HTTP API as a new user meets them: typed errors for every code and for an unreachable
or foreign URL, token ranges clipped as Python slices clip, HEAD with the GET's length, an OpenAPI document that
shows the real contract, /docs without internet, and the error envelope even for the unexpected."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

import client as client_package
from client import (
    ConnectionFailedError,
    FeatureClient,
    HsstoreError,
    InvalidRequestError,
    NotHsstoreError,
    WindowClosedError,
)
from client.errors import BY_CODE, error_for
from schemas.errors import ErrorCode
from service import errors as service_errors
from service.api.error_handlers import STATUS
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer, free_port


def test_connection_failure_is_the_clients_own_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with FeatureClient(url) as hs, pytest.raises(ConnectionFailedError) as raised:
        hs.info()
    assert isinstance(raised.value, HsstoreError) and raised.value.url == url and url in str(raised.value)
    # each says why in the socket's words (a read's own connection once said "(Empty)": the pool's empty queue)
    with FeatureClient(url) as hs, pytest.raises(ConnectionFailedError, match=r"Connection refused\)$"):
        hs.get(prompt_hash="a" * 64)
    with FeatureClient(url) as hs, pytest.raises(ConnectionFailedError, match=r"Connection refused\)$"):
        hs.exists(prompt_hash="a" * 64)


def test_a_foreign_server_is_not_taken_for_hsstore(foreign_url: str) -> None:
    with FeatureClient(foreign_url) as hs:
        with pytest.raises(NotHsstoreError, match=r"200 \(text/html\)"):
            hs.info()  # a 200 that is not our JSON
        with pytest.raises(NotHsstoreError, match="404"):
            list(hs.entries())
        with pytest.raises(NotHsstoreError):
            hs.exists(prompt_hash="a" * 64)  # a bare 404 is not "no such entry"


def test_every_error_code_has_its_own_client_class() -> None:
    assert set(BY_CODE) == set(ErrorCode)
    assert all(cls is not HsstoreError for cls in BY_CODE.values())
    assert set(BY_CODE.values()) <= {getattr(client_package, name) for name in client_package.__all__}
    for cls in vars(service_errors).values():
        if (
            isinstance(cls, type)
            and issubclass(cls, service_errors.HsstoreError)
            and cls is not service_errors.HsstoreError
        ):
            assert cls.code in ErrorCode and any(issubclass(cls, mapped) for mapped in STATUS), cls
    assert type(error_for(409, "window_closed", "shut")) is WindowClosedError
    assert type(error_for(418, "no_such_code", "?")) is InvalidRequestError


def test_a_closed_window_arrives_as_window_closed(settings: Settings, tiny_loaded: LoadedModel) -> None:
    app = create_app(settings.model_copy(update={"windows": ["Sat 03:00-04:00 UTC"]}), tiny_loaded)
    with LiveServer(app) as url, FeatureClient(url) as hs, pytest.raises(WindowClosedError) as raised:
        hs.extract([{"text": "not now"}])
    assert raised.value.status == 409 and raised.value.code == "window_closed"


def test_token_ranges_past_the_end_are_clipped_like_python_slices(client: FeatureClient, http: httpx.Client) -> None:
    sample = {"text": "a short entry"}
    n = client.extract([sample]).results[0].manifest.num_tokens
    clipped = client.get(sample, tokens=(0, n + 500))
    assert clipped.tokens == (0, n) and clipped.full and clipped.hidden_states.shape[0] == n
    tail = client.get(sample, tokens=(n - 2, None), layers=[1])
    assert tail.tokens == (n - 2, n) and tail.hidden_states.shape[:2] == (2, 1)
    response = http.get(f"/v1/features/{clipped.manifest.prompt_hash}", params={"tokens": f"1:{n + 9}"})
    assert response.headers["x-hsstore-tokens"] == f"1:{n}"
    with pytest.raises(InvalidRequestError, match="selects no token"):
        client.get(sample, tokens=(n, n + 5))  # nothing left: the only error
    with pytest.raises(ValueError, match="non-negative"):
        client.get(sample, tokens=(-1, 3))


@pytest.mark.parametrize("params", [{}, {"layers": "2"}, {"tokens": "1:3"}, {"layers": "embed,2", "tokens": ":99"}])
def test_head_answers_with_the_length_the_get_sends(client: FeatureClient, http: httpx.Client, params: dict) -> None:
    m = client.extract([{"text": "lengths"}], featureset=["embed", 1, 2]).results[0].manifest
    url = f"/v1/features/{m.prompt_hash}"
    head, get = http.head(url, params=params), http.get(url, params=params)
    assert head.status_code == get.status_code == 200
    assert int(head.headers["content-length"]) == len(get.content) == int(get.headers["content-length"])


def test_head_errors_are_typed(client: FeatureClient, http: httpx.Client) -> None:
    assert not client.exists(prompt_hash="f" * 64)
    bad = http.head("/v1/features/nothex")
    assert bad.status_code == 422 and bad.headers["x-hsstore-error"] == "invalid_request"
    with pytest.raises(InvalidRequestError):
        client.exists(prompt_hash="nothex")


def test_openapi_shows_the_real_contract(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            assert operation.get("summary"), (method, path)
            for status in (str(s) for s in (401, 422, 500) if str(s) in operation["responses"]):
                ref = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorBody"), (method, path, status)
    assert {"401", "403", "404", "409", "422", "500"} <= set(
        spec["paths"]["/v1/features/{prompt_hash}"]["get"]["responses"]
    )
    assert {"409", "413", "503"} <= set(spec["paths"]["/v1/extract"]["post"]["responses"])
    body = spec["paths"]["/v1/features/{prompt_hash}"]["get"]["responses"]["200"]["content"]
    assert body["application/octet-stream"]["schema"]["format"] == "binary"
    samples = spec["components"]["schemas"]["ExtractRequest"]["properties"]["samples"]["items"]
    assert {"messages", "text", "token_ids", "completion", "chat_template_kwargs", "id"} <= set(samples["properties"])
    completion = next(s for s in samples["properties"]["completion"]["anyOf"] if s.get("type") == "object")
    assert {"text", "token_ids", "greedy"} <= set(completion["properties"])
    parameters = {p["name"]: p["schema"] for p in spec["paths"]["/v1/features/{prompt_hash}"]["get"]["parameters"]}
    assert parameters["prompt_hash"]["pattern"] == "^[0-9a-f]{64}$"  # the hex formats of the keys are declared
    assert parameters["content_hash"]["pattern"] == "^sha256:[0-9a-f]{64}$"
    assert spec["components"]["schemas"]["FeatureRead"]["properties"]["prompt_hash"]["pattern"] == "^[0-9a-f]{64}$"
    codes = spec["components"]["schemas"]["ErrorCode"]["enum"]
    assert set(codes) == {c.value for c in ErrorCode}


def test_docs_work_without_internet(http: httpx.Client) -> None:
    page = http.get("/docs")
    assert page.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text.replace("https://fastapi", "")
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert http.get(f"/docs/assets/{asset}").status_code == 200


def test_an_unexpected_failure_answers_the_envelope_and_keeps_the_connection(app: FastAPI) -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/test-only/broken", broken)
    opened: list[object] = []
    with LiveServer(app) as url, httpx.Client(base_url=url) as raw:
        raw.get(
            "/healthz",
            extensions={
                "trace": lambda name, info: (
                    opened.append(name) if name.startswith("connection.connect_tcp.complete") else None
                )
            },
        )
        failed = raw.get("/test-only/broken")
        assert failed.status_code == 500 and failed.json() == {
            "error": {"code": "internal_error", "message": "the service failed unexpectedly; its log says why"}
        }
        assert failed.headers["x-hsstore-error"] == "internal_error"
        assert raw.get("/healthz").status_code == 200  # the same keep-alive connection still serves
    assert len(opened) == 1
