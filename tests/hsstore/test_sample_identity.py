"""One key per sample, whatever carried it: ten samples of every form (chats with and without extra message fields, a
tool call whose assistant turn has `content: null`, completions as text and as token ids, a greedy completion,
token ids, with and without an `id`) through HTTP JSON, the CLI's JSONL, the Python client, pandas records, and the
rows of Ray Datasets from `from_items`, `read_json`, `read_parquet` (written by Ray and by pandas) and `from_pandas`,
which fill the members other rows have with null (pandas: NaN). Each sample gets one prompt hash and one content
hash everywhere, and the prompt hash is `client.prompt_hash` of the sample as written."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
import ray
from typer.testing import CliRunner

from client import FeatureClient, prompt_hash
from hsstore.cli import app
from hsstore.ray_stage import extract_rows, extract_samples
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import REPO

SAMPLES: list[dict[str, Any]] = [
    {"id": "chat", "messages": [{"role": "user", "content": "Write fizzbuzz."}]},
    {
        "id": "chat-reasoning",
        "messages": [
            {"role": "user", "content": "Sort a list."},
            {"role": "assistant", "content": "sorted(xs)", "reasoning_content": "Python has sorted."},
        ],
    },
    {
        "id": "chat-name",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "name": "ana"}],
        "chat_template_kwargs": {"enable_thinking": False},
    },
    {  # content null where it means something: an assistant turn that only calls a tool
        "id": "tool-call",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}],
            },
            {"role": "tool", "content": "18C", "tool_call_id": "c1"},
        ],
    },
    {"id": "completion-text", "text": "def add(a, b):", "completion": {"text": "\n    return a + b"}},
    {"id": "completion-ids", "text": "def mul(a, b):", "completion": {"token_ids": [10, 11, 12]}},
    {"id": "token-ids", "token_ids": [5, 6, 7, 8, 9]},
    {"text": "a sample without an id"},
    {"id": "chat-completion", "messages": [{"role": "user", "content": "Say hi."}], "completion": {"text": "hi"}},
    {"id": "greedy", "text": "count:", "completion": {"greedy": {"max_new_tokens": 3}}},
]
Keys = dict[str | None, tuple[str, str]]  # sample id -> (prompt hash, content hash)


def _keys(rows: list[tuple[str | None, str, str]]) -> Keys:
    keys: Keys = {}
    for sample_id, prompt, content in rows:
        assert keys.setdefault(sample_id, (prompt, content)) == (prompt, content)
    assert len(keys) == len(rows) == len(SAMPLES)
    return keys


@pytest.fixture
def by_http(live_url: str) -> Keys:
    """The reference: the samples POSTed as JSON."""
    response = httpx.post(f"{live_url}/v1/extract", json={"samples": SAMPLES}, timeout=120)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    keys = _keys([(r["sample_id"], r["prompt_hash"], r["manifest"]["content_hash"]) for r in results])
    assert {s.get("id"): prompt_hash(s) for s in SAMPLES} == {i: k[0] for i, k in keys.items()}
    return keys


def test_http_the_cli_the_client_and_pandas_records_give_one_key_per_sample(
    by_http: Keys, live_url: str, tmp_path: Path
) -> None:
    jsonl = tmp_path / "samples.jsonl"
    jsonl.write_text("".join(json.dumps(s) + "\n" for s in SAMPLES))
    printed = CliRunner().invoke(app, ["extract", str(jsonl), "--json", "--url", live_url])
    assert printed.exit_code == 0, printed.output
    lines = [json.loads(line) for line in printed.output.splitlines() if line.startswith("{")]
    assert _keys([(r["id"], r["prompt_hash"], r["content_hash"]) for r in lines]) == by_http

    with FeatureClient(live_url) as client:
        for samples in (SAMPLES, pd.DataFrame(SAMPLES).to_dict("records")):  # pandas: NaN where a column is missing
            results = client.extract(samples).results
            assert _keys([(r.sample_id, r.prompt_hash, r.manifest.content_hash) for r in results]) == by_http
            assert [r.status.value for r in results] == ["existing"] * len(SAMPLES)
        for sample in SAMPLES:  # and a read by the sample as written finds its entry
            assert client.get(sample).manifest.content_hash == by_http[sample.get("id")][1]


def _ray_sources(tmp_path: Path) -> Iterator[tuple[str, Callable[[], ray.data.Dataset]]]:
    """Every way a sample file reaches Ray Data that the guide names, each read afresh."""
    jsonl = tmp_path / "samples.jsonl"
    jsonl.write_text("".join(json.dumps(s) + "\n" for s in SAMPLES))
    ray.data.from_items(SAMPLES).repartition(1).write_parquet(str(tmp_path / "by-ray"))
    pd.DataFrame(SAMPLES).to_parquet(tmp_path / "by-pandas.parquet")
    yield "from_items", lambda: ray.data.from_items(SAMPLES)
    yield "read_json", lambda: ray.data.read_json(str(jsonl))
    yield "read_parquet (Ray's)", lambda: ray.data.read_parquet(str(tmp_path / "by-ray"))
    yield "read_parquet (pandas')", lambda: ray.data.read_parquet(str(tmp_path / "by-pandas.parquet"))
    yield "from_pandas", lambda: ray.data.from_pandas(pd.DataFrame(SAMPLES))


@pytest.mark.usefixtures("local_ray")
def test_every_ray_source_gives_the_keys_http_gives(
    by_http: Keys, settings: Settings, tiny_loaded: LoadedModel, tmp_path: Path
) -> None:
    """The stage's rows as each source's blocks hold them (batches of 4: other rows' fields filled in with null),
    extracted by the stage's own code (`extract_rows`) into the store the HTTP samples went to."""
    services = build_services(settings, tiny_loaded)
    try:
        for source, dataset in _ray_sources(tmp_path):
            batches = dataset().iter_batches(batch_format="pyarrow", batch_size=4)
            rows = [row for batch in batches for row in extract_rows(services.writer, batch, None, "auto").to_pylist()]
            assert {row["status"] for row in rows} == {"existing"}, (source, rows)
            assert _keys([(r["sample_id"], r["prompt_hash"], r["content_hash"]) for r in rows]) == by_http, source
    finally:
        services.close()


@pytest.mark.usefixtures("local_ray")
def test_the_stage_on_actors_finds_what_http_stored(by_http: Keys, settings: Settings) -> None:
    """End to end: one actor of `extract_samples` (its own process and model) on the HTTP samples' store."""
    env = {"env_vars": {"PYTHONPATH": str(REPO)}}
    stage = extract_samples(ray.data.from_items(SAMPLES), settings=settings, num_gpus=0, batch_size=5, runtime_env=env)
    rows = stage.take_all()
    assert {row["status"] for row in rows} == {"existing"}, rows
    assert _keys([(r["sample_id"], r["prompt_hash"], r["content_hash"]) for r in rows]) == by_http
