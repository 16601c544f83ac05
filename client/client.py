"""`FeatureClient`: the thin httpx client training jobs, eval scripts and operators use. It never loads a model."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from client.cache import FeatureCache
from client.errors import ConnectionFailed, HsstoreError, IntegrityError, NotHsstoreError, error_for
from client.features import Features, decode_verified
from schemas import wire
from schemas.api import (
    AuditReport,
    CompareReport,
    EntriesPage,
    ExtractResponse,
    Info,
    JobList,
    JobStatus,
    WindowState,
)
from schemas.errors import ERROR_HEADER, ErrorCode
from schemas.featureset import FeatureSet, LayerId
from schemas.manifest import Manifest
from schemas.prompt_hash import prompt_hash as hash_prompt
from schemas.tokens import TokenRange

DEFAULT_URL = "http://127.0.0.1:8000"
ModelT = TypeVar("ModelT", bound=BaseModel)


class FeatureClient:
    """`http` is the transport seam: pass any `httpx.Client` (an in-process ASGI client in tests), else one is made."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 600.0,
        http: httpx.Client | None = None,
        cache: FeatureCache | str | Path | None = None,
        max_connections: int = 16,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owns_http = http is None
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout, limits=limits)
        self._http.headers.update(headers)
        self.cache = FeatureCache(cache) if isinstance(cache, str | Path) else cache
        self._pool: ThreadPoolExecutor | None = None
        self._max_connections = max_connections

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> FeatureClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return str(self._http.base_url).rstrip("/")

    @contextmanager
    def _transport(self, method: str, path: str) -> Iterator[None]:
        """httpx's transport failures as the client's own error, naming the URL tried."""
        try:
            yield
        except httpx.ConnectError as exc:
            raise ConnectionFailed(f"cannot connect to {self.url} ({_reason(exc)})", self.url) from None
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(f"{method} {self.url}{path} timed out ({type(exc).__name__})", self.url) from None
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{method} {self.url}{path} failed: {_reason(exc)}", self.url) from None

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        with self._transport(method, url):
            response = self._http.request(method, url, **kwargs)
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def _call(self, model: type[ModelT], method: str, url: str, **kwargs: Any) -> ModelT:
        """A request whose answer is one of the contract's JSON models."""
        response = self._request(method, url, **kwargs)
        try:
            return model.model_validate_json(response.content)
        except ValidationError:
            raise self._not_hsstore(response) from None

    def _error(self, response: httpx.Response) -> HsstoreError:
        try:
            detail = response.json()["error"]
            return error_for(response.status_code, detail["code"], str(detail["message"]))
        except (ValueError, KeyError, TypeError):
            return self._not_hsstore(response)

    def _not_hsstore(self, response: httpx.Response) -> NotHsstoreError:
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        return NotHsstoreError(
            f"{self.url} answered {response.request.method} {response.request.url.path} with HTTP "
            f"{response.status_code} ({kind}), not as an hsstore service does: is this the right URL?",
            response.status_code,
        )

    # -- API -----------------------------------------------------------------------------------------------------
    def info(self) -> Info:
        return self._call(Info, "GET", "/v1/info")

    def extract(
        self,
        samples: Sequence[Mapping[str, Any]],
        featureset: FeatureSet | Sequence[LayerId] | None = None,
        backend: str | None = None,
        force: bool = False,
    ) -> ExtractResponse:
        body: dict[str, Any] = {"samples": [dict(s) for s in samples], "force": force}
        if featureset is not None:
            fs = featureset if isinstance(featureset, FeatureSet) else FeatureSet(layers=list(featureset))
            body["featureset"] = fs.model_dump()
        if backend is not None:
            body["backend"] = backend
        return self._call(ExtractResponse, "POST", "/v1/extract", json=body)

    def get(
        self,
        prompt: Mapping[str, Any] | None = None,
        *,
        prompt_hash: str | None = None,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        layers: Iterable[LayerId] | None = None,
        tokens: tuple[int | None, int | None] | None = None,
        content_hash: str | None = None,
    ) -> Features:
        """Fetch one entry's features, verified. Name the prompt (hashed here) or its prompt_hash. A full entry pinned
        by content hash is served from the cache when it is there, without any request."""
        whole = layers is None and tokens is None
        if self.cache is not None and content_hash is not None and whole:
            cached = self.cache.get(content_hash)
            if cached is not None:
                return cached
        key, params = self._key_params(prompt, prompt_hash, backend, model_revision, featureset, content_hash)
        url = f"/v1/features/{key}"
        if layers is not None:
            params["layers"] = ",".join(str(layer) for layer in layers)
        if tokens is not None:
            params["tokens"] = str(TokenRange.of(tokens))
        return self._received(self._receive("GET", url, params=params))

    def get_many(self, keys: Sequence[Mapping[str, Any]]) -> list[Features]:
        """`get(**key)` for every key, in parallel over the connection pool; results in order."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_connections, thread_name_prefix="hsstore-client")
        return list(self._pool.map(lambda key: self.get(**key), keys))

    def get_batch(self, keys: Sequence[Mapping[str, Any]]) -> list[Features]:
        """Several entries in one request through `POST /v1/features:batch`; each body verified."""
        wanted = []
        for key in keys:
            item = {k: v for k, v in key.items() if v is not None and k != "prompt"}
            if "prompt" in key:
                item["prompt_hash"] = hash_prompt(key["prompt"])
            if "featureset" in item and isinstance(item["featureset"], FeatureSet):
                item["featureset"] = item["featureset"].id
            if "tokens" in item and not isinstance(item["tokens"], str):
                item["tokens"] = str(TokenRange.of(item["tokens"]))
            if "layers" in item:
                item["layers"] = list(item["layers"])
            wanted.append(item)
        body = self._request("POST", "/v1/features:batch", json={"keys": wanted}).content
        try:
            frames = wire.split_frames(body)
        except wire.WireFormatError as exc:
            raise IntegrityError(f"malformed batch body: {exc}") from None
        if len(frames) != len(wanted):
            raise IntegrityError(f"asked for {len(wanted)} entries, received {len(frames)}")
        return [self._received(frame) for frame in frames]

    def _receive(self, method: str, url: str, **kwargs: Any) -> bytearray | bytes:
        """The body, streamed into one buffer sized by Content-Length (no list of chunks joined afterwards)."""
        with self._transport(method, url), self._http.stream(method, url, **kwargs) as response:
            if response.status_code >= 400:
                response.read()
                raise self._error(response)
            length = response.headers.get("content-length")
            if length is None or not length.isdigit():
                return response.read()
            body = bytearray(int(length))
            view, filled = memoryview(body), 0
            for chunk in response.iter_raw():
                view[filled : filled + len(chunk)] = chunk
                filled += len(chunk)
            if filled != len(body):
                raise IntegrityError(f"received {filled} of {len(body)} bytes")
            return body

    def _received(self, body: bytes | bytearray | memoryview) -> Features:
        features = decode_verified(body)
        if self.cache is not None:
            self.cache.put(features, body)
        return features

    def exists(
        self,
        prompt: Mapping[str, Any] | None = None,
        *,
        prompt_hash: str | None = None,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        content_hash: str | None = None,
    ) -> bool:
        key, params = self._key_params(prompt, prompt_hash, backend, model_revision, featureset, content_hash)
        url = f"/v1/features/{key}"
        with self._transport("HEAD", url):
            response = self._http.head(url, params=params)
        if response.status_code == 404 and response.headers.get(ERROR_HEADER) == ErrorCode.NOT_FOUND:
            return False
        if response.status_code >= 400:
            # a HEAD answer has no body: the service names its error code in a header
            code = response.headers.get(ERROR_HEADER)
            if code is None:
                raise self._not_hsstore(response)
            raise error_for(response.status_code, code, f"HEAD {url} answered {response.status_code} {code}")
        return True

    def entries(
        self,
        *,
        prompt_hash: str | None = None,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        content_hash: str | None = None,
        since: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Manifest]:
        """Every matching version, oldest first, page by page (`prompt_hash` and `content_hash` may be prefixes)."""
        cursor = None
        while True:
            page = self.entries_page(
                prompt_hash=prompt_hash,
                backend=backend,
                model_revision=model_revision,
                featureset=featureset,
                content_hash=content_hash,
                since=since,
                limit=page_size,
                cursor=cursor,
            )
            yield from page.entries
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def entries_page(
        self,
        *,
        prompt_hash: str | None = None,
        backend: str | None = None,
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        content_hash: str | None = None,
        since: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> EntriesPage:
        """One page of the listing; pass its `next_cursor` back for the next."""
        params: dict[str, Any] = {"limit": limit}
        for name, value in (
            ("prompt_hash", prompt_hash),
            ("backend", backend),
            ("model_revision", model_revision),
            ("featureset", _featureset_id(featureset)),
            ("content_hash", content_hash),
            ("since", since),
            ("cursor", cursor),
        ):
            if value is not None:
                params[name] = value
        return self._call(EntriesPage, "GET", "/v1/entries", params=params)

    def compare(
        self,
        prompt: Mapping[str, Any] | None = None,
        *,
        prompt_hash: str | None = None,
        a: str = "fla",
        b: str = "torch",
        model_revision: str | None = None,
        featureset: FeatureSet | str | None = None,
        extract: bool = False,
    ) -> CompareReport:
        """Per-layer agreement of two backends' features for one prompt; `extract` fills in a missing side."""
        key, params = self._key_params(prompt, prompt_hash, None, model_revision, featureset, None)
        params.update({"a": a, "b": b, "extract": extract})
        return self._call(CompareReport, "GET", f"/v1/compare/{key}", params=params)

    def audit(self, sample: int, backend: str | None = None, seed: int | None = None) -> AuditReport:
        """Re-extract `sample` stored entries and report which reproduce their content hash bit for bit."""
        body = {"sample": sample, "backend": backend, "seed": seed}
        return self._call(AuditReport, "POST", "/v1/audit", json=body)

    # -- warm jobs and windows (operators) -----------------------------------------------------------------------
    def submit_job(
        self,
        samples: Sequence[Mapping[str, Any]] | None = None,
        *,
        jsonl: bytes | None = None,
        backends: Sequence[str] = ("auto",),
        layers: Sequence[LayerId] | None = None,
        completion: str | None = None,
        priority: int = 0,
        run_now: bool = False,
    ) -> JobStatus:
        """A warm job from samples, or from a JSONL upload as it is on disk (one sample per line)."""
        if (samples is None) == (jsonl is None):
            raise ValueError("give samples or jsonl")
        if jsonl is not None:
            params: dict[str, Any] = {"backend": list(backends), "priority": priority, "run_now": run_now}
            if layers is not None:
                params["layers"] = ",".join(map(str, layers))
            if completion is not None:
                params["completion"] = completion
            response = self._request(
                "POST", "/v1/jobs", content=jsonl, params=params, headers={"content-type": "application/x-ndjson"}
            )
        else:
            body: dict[str, Any] = {
                "samples": [dict(s) for s in samples or []],
                "backends": list(backends),
                "priority": priority,
                "run_now": run_now,
                "completion": completion,
            }
            if layers is not None:
                body["featureset"] = FeatureSet(layers=list(layers)).model_dump()
            response = self._request("POST", "/v1/jobs", json=body)
        try:
            return JobStatus.model_validate_json(response.content)
        except ValidationError:
            raise self._not_hsstore(response) from None

    def job(self, job_id: str) -> JobStatus:
        return self._call(JobStatus, "GET", f"/v1/jobs/{job_id}")

    def jobs(self) -> list[JobStatus]:
        return self._call(JobList, "GET", "/v1/jobs").jobs

    def cancel_job(self, job_id: str) -> JobStatus:
        return self._call(JobStatus, "DELETE", f"/v1/jobs/{job_id}")

    def window(self) -> WindowState:
        return self._call(WindowState, "GET", "/v1/window")

    def open_window(self, minutes: float) -> WindowState:
        return self._call(WindowState, "POST", "/v1/window/open", json={"minutes": minutes})

    def close_window(self) -> WindowState:
        return self._call(WindowState, "POST", "/v1/window/close")

    def _key_params(
        self,
        prompt: Mapping[str, Any] | None,
        prompt_hash: str | None,
        backend: str | None,
        model_revision: str | None,
        featureset: FeatureSet | str | None,
        content_hash: str | None,
    ) -> tuple[str, dict[str, Any]]:
        if (prompt is None) == (prompt_hash is None):
            raise ValueError("name exactly one of prompt or prompt_hash")
        key = prompt_hash if prompt_hash is not None else hash_prompt(prompt)  # type: ignore[arg-type]
        params: dict[str, Any] = {}
        for name, value in (
            ("backend", backend),
            ("model_revision", model_revision),
            ("featureset", _featureset_id(featureset)),
            ("content_hash", content_hash),
        ):
            if value is not None:
                params[name] = value
        return key, params


def _featureset_id(featureset: FeatureSet | str | None) -> str | None:
    return featureset.id if isinstance(featureset, FeatureSet) else featureset


def _reason(exc: httpx.TransportError) -> str:
    """The innermost cause in a few words ('[Errno 111] Connection refused'), not httpx's whole chain."""
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    text = str(cause) or type(cause).__name__
    return text[:200]
