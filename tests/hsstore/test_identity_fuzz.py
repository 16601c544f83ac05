"""The sample's identity is total and one function whatever carried the sample, held by Hypothesis (#66).

Samples are drawn from the sample format and from arbitrary JSON around it (tests/support/sample_fuzz.py). Each
goes through `prompt_hash` and `parse_sample` (the contract), a JSONL line as the CLI and an upload read it, an
Arrow row as Ray's blocks hold it and a pandas record; then, against a real server of the tiny model, through the
HTTP API, the Python client, the CLI and the Ray stage's own code. Every path gives the sample's key or refuses it
with a 4xx (or the client's typed error); never a 5xx, another exception, or another key. The service may refuse
what the format takes (token ids past the vocabulary, a chat template that cannot render it), and then every
service path refuses it alike.

`HSSTORE_FUZZ_SCALE` multiplies the examples (benchmarks/identity_fuzz.py runs 10^5 this way); the cases Hypothesis
once shrank to are kept as `@example`s.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow as pa
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from typer.testing import CliRunner

from client import FeatureClient, HsstoreError
from client.errors import ServerError
from hsstore.cli import app as cli
from hsstore.ray_stage import extract_rows
from schemas.json_limits import SAMPLE_LIMITS, JsonLimitError, check_depth
from schemas.jsonl import JsonlError, iter_jsonl
from schemas.prompt_hash import prompt_hash
from tests.support.sample_fuzz import (
    Outcome,
    json_samples,
    local_outcome,
    python_samples,
    samples,
    well_formed,
    wire_json,
)

SCALE = float(os.environ.get("HSSTORE_FUZZ_SCALE", "1"))


def _deep(depth: int, kind: str = "object") -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value] if kind == "array" else {"a": value}
    return value


CHAT = [{"role": "user", "content": "hi"}]
# what the held-out fuzz found at 165af17 (a 500 each), and what shrinking found since
REGRESSIONS: list[Any] = [
    {"messages": CHAT, "chat_template_kwargs": _deep(500)},
    {"messages": CHAT, "chat_template_kwargs": _deep(900)},
    {"messages": [{"role": "user", "content": "hi", "x": _deep(500, "array")}]},
    {"messages": [{"role": "user", "content": "hi", "x": _deep(900, "array")}]},
    {"messages": CHAT, "chat_template_kwargs": {"n": 10**4301}},
    {"text": "x", "completion": {"token_ids": [float("nan")]}},
    {"text": "x", "completion": {"token_ids": [2**64]}},
    {"text": "x", "id": None, "completion": float("nan")},
    {"token_ids": [0, 1, 1024]},
]


def _json_text(value: Any) -> str | None:
    """The sample as sorted JSON text with null (and NaN) members dropped: this test's own reading of the rule, to
    tell whether Arrow or pandas kept a sample (None where it cannot say)."""

    def strip(v: Any) -> Any:
        v = v.tolist() if hasattr(v, "tolist") and not isinstance(v, str | bytes) else v
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not (x is None or (isinstance(x, float) and math.isnan(x)))}
        if isinstance(v, list | tuple):
            return [strip(x) for x in v]
        return v

    try:
        return json.dumps(strip(value), sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return None


def _tabular(sample: Any) -> bool:
    """Whether a table could hold `sample`: an object, nested no deeper than a sample may be (Arrow infers a type
    for each of thousands of levels for seconds, only to hold what every path refuses)."""
    try:
        check_depth(sample, SAMPLE_LIMITS.depth)
    except JsonLimitError:
        return False
    return isinstance(sample, dict)


def _through_arrow(sample: Any) -> dict[str, Any] | None:
    """The row Ray's blocks hold for `sample` (None where Arrow cannot take it: mixed types, empty objects)."""
    if not _tabular(sample):
        return None
    try:
        return pa.Table.from_pylist([sample]).to_pylist()[0]
    except Exception:  # Arrow's own limits (it raises several kinds): a sample no Ray block can hold
        return None


def _through_pandas(sample: Any) -> dict[str, Any] | None:
    if not _tabular(sample):
        return None
    try:
        return pd.DataFrame([sample]).to_dict("records")[0]
    except Exception:  # pandas' own limits: a sample no frame can hold
        return None


def _check_contract(sample: Any) -> Outcome:
    """The contract's paths agree: `prompt_hash` is total and is `parse_sample`'s key wherever that one takes the
    sample; a JSONL line of it reads to the same outcome."""
    local = local_outcome(sample)
    _count("contract: refused" if local.refused else "contract: keyed")
    try:
        bare: str | None = prompt_hash(sample)
    except ValueError:
        bare = None
    if local.key is not None:
        assert bare == local.key
    if bare is None:
        assert local.refused
    if (line := _jsonl_line(sample)) is not None:
        try:
            (read,) = iter_jsonl(line.encode("utf-8", "surrogatepass"), "the file")
        except JsonlError:
            assert local.refused, (local, line[:200])
        else:
            assert local_outcome(read) == local or (local.refused and local_outcome(read).refused)
    for moved in (_through_arrow(sample), _through_pandas(sample)):
        if moved is not None and _json_text(moved) is not None and _json_text(moved) == _json_text(sample):
            assert local_outcome(moved).key == local.key, (moved, sample)
    return local


def _count(what: str) -> None:
    """How often each outcome came (Hypothesis' statistics; the benchmark's record), where Hypothesis runs."""
    if currently_in_test_context():
        event(what)


def _jsonl_line(sample: Any) -> str | None:
    try:
        return json.dumps(sample)
    except (TypeError, ValueError, RecursionError):
        return None


@settings(max_examples=int(600 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(json_samples | python_samples)
def test_the_identity_is_total_and_one_on_every_local_path(sample: Any) -> None:
    _check_contract(sample)


@pytest.mark.parametrize("sample", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_the_regressions_are_refused_or_keyed_locally(sample: Any) -> None:
    _check_contract(sample)


class ServicePaths:
    """The service's paths for one sample, against a real server (HTTP, the client, the CLI) and its writer (the
    Ray stage's own code over an Arrow batch)."""

    def __init__(self, url: str, app: FastAPI, tmp: Path) -> None:
        self.url, self.writer, self.tmp = url, app.state.services.writer, tmp
        self.http = httpx.Client(base_url=url, timeout=120)
        self.client = FeatureClient(url)

    def close(self) -> None:
        self.http.close()
        self.client.close()

    def by_http(self, sample: Any) -> Outcome | None:
        body = wire_json(sample)
        if body is None:
            return None
        response = self.http.post("/v1/extract", content=body, headers={"content-type": "application/json"})
        assert response.status_code < 500, response.text
        if response.status_code == 200:
            return Outcome(response.json()["results"][0]["prompt_hash"])
        assert response.status_code in (400, 409, 413, 422), response.text
        assert response.json()["error"]["message"]
        return Outcome(None, response.text)

    def by_client(self, sample: Any) -> Outcome:
        try:
            return Outcome(self.client.extract([sample]).results[0].prompt_hash)
        except ServerError as exc:
            raise AssertionError(f"a server error for {sample!r:.300}: {exc}") from None
        except HsstoreError as exc:
            assert exc.status is None or 400 <= exc.status < 500, exc
            return Outcome(None, str(exc))

    def by_cli(self, sample: Any) -> Outcome | None:
        line = _jsonl_line(sample)
        if line is None:
            return None
        path = self.tmp / "samples.jsonl"
        path.write_bytes(line.encode("utf-8", "surrogatepass") + b"\n")
        printed = CliRunner().invoke(cli, ["extract", str(path), "--json", "--url", self.url])
        assert printed.exit_code in (0, 1) and isinstance(printed.exception, SystemExit | None), printed.output
        if printed.exit_code == 1:
            assert "Traceback" not in printed.output and printed.output.strip(), printed.output
            return Outcome(None, printed.output)
        (result,) = [json.loads(out) for out in printed.output.splitlines() if out.startswith("{")]
        return Outcome(result["prompt_hash"])

    def by_ray_stage(self, row: dict[str, Any]) -> Outcome:
        (out,) = extract_rows(self.writer, pa.Table.from_pylist([row]), None, "auto").to_pylist()
        return Outcome(None, out["error"]) if out["status"] == "failed" else Outcome(out["prompt_hash"])


@pytest.fixture
def paths(live_url: str, app: FastAPI, tmp_path: Path) -> Any:
    found = ServicePaths(live_url, app, tmp_path)
    yield found
    found.close()


def _check_service(paths: ServicePaths, sample: Any) -> None:
    local = _check_contract(sample)
    seen = {"client": paths.by_client(sample), "http": paths.by_http(sample), "cli": paths.by_cli(sample)}
    for moved in (_through_pandas(sample),):
        if moved is not None and _json_text(moved) == _json_text(sample):
            seen["pandas"] = paths.by_client(moved)
    outcomes = {name: o for name, o in seen.items() if o is not None}
    keys = {o.key for o in outcomes.values()}
    assert len(keys) == 1, (sample, outcomes)  # every service path alike: one key, or all refused
    _count("service: refused" if keys == {None} else "service: keyed")
    if local.refused:
        assert keys == {None}, (sample, local, outcomes)
    assert keys <= {local.key, None}, (sample, local, outcomes)
    if (row := _through_arrow(sample)) is not None:
        ray = paths.by_ray_stage(row)
        row_local = local_outcome(row)
        assert ray.key in (row_local.key, None), (row, ray, row_local)
        if _json_text(row) is not None and _json_text(row) == _json_text(sample):
            assert ray.key == keys.pop(), (sample, ray, outcomes)


@settings(max_examples=int(60 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(sample=well_formed | samples | python_samples)
@example(sample={"messages": CHAT, "chat_template_kwargs": {"enable_thinking": False}})
def test_every_service_path_gives_the_key_or_the_same_refusal(paths: ServicePaths, sample: Any) -> None:
    _check_service(paths, sample)


@pytest.mark.parametrize("sample", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_the_regressions_through_every_service_path(paths: ServicePaths, sample: Any) -> None:
    _check_service(paths, sample)
