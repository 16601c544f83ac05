"""The estimate, before anything runs, against what an extraction then stores: tokens exact, bytes within 10% on
the demo's prompts; the CLI prints it; bad samples are refused as extraction refuses them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from client import BackendUnavailableError, FeatureClient, FeatureSet, SampleRejectedError
from hsstore.cli import app as cli
from tests.conftest import coding_prompts


def _stored_bytes(app_state, manifests) -> int:
    return sum(app_state.store.stored_bytes(m.content_hash) for m in manifests)


@pytest.mark.parametrize(
    "layers",
    [
        ["embed", 1, 4, 7],
        FeatureSet(layers=[1, 4, 7], dtype="float8_e4m3fn", target_ids=True, top_k=16),
    ],
    ids=["bf16", "fp8-top16"],
)
def test_estimate_matches_an_actual_extraction(client: FeatureClient, app, layers) -> None:
    prompts = coding_prompts()
    # a few stored entries of the featureset give the store's own compression ratio
    client.extract(prompts[:3], featureset=layers)
    report = client.estimate(prompts[3:], featureset=layers, backends=["torch"])
    assert "measured on 3 stored entries" in report.compression_ratio_source
    assert report.gpu_hours is None and "give tokens_per_s" in report.tokens_per_s_source
    results = client.extract(prompts[3:], featureset=layers, backend="torch").results
    manifests = [r.manifest for r in results]
    assert report.tokens == sum(m.num_tokens for m in manifests)  # tokenised as extraction tokenises
    raw = sum(t.data.nbytes for m in manifests for t in client.fetch(m.feature_key()).tensors.values())
    assert report.raw_bytes == raw
    actual = _stored_bytes(app.state, manifests)
    assert abs(report.stored_bytes - actual) / actual < 0.10, (report.stored_bytes, actual)
    assert report.samples == len(prompts[3:]) and report.backends == ["torch"]


def test_estimate_rates_and_gpu_hours(client: FeatureClient) -> None:
    report = client.estimate([{"text": "def f(): pass"}], featureset=[1], tokens_per_s=1000.0)
    assert report.tokens_per_s == 1000.0 and report.gpu_hours == pytest.approx(report.tokens / 1000 / 3600)
    assert "codec table" in report.compression_ratio_source  # nothing of this featureset is stored yet
    with pytest.raises(BackendUnavailableError):  # as extraction would: fla-noconv needs a GPU
        client.estimate([{"text": "def f(): pass"}], featureset=[1], backends=["torch", "fla-noconv"])


def test_a_bad_sample_is_refused_as_extraction_refuses_it(client: FeatureClient) -> None:
    with pytest.raises(SampleRejectedError, match=r"samples\[1\]"):
        client.estimate([{"text": "ok"}, {"messages": "not a list"}])
    assert not list(client.entries())  # nothing was stored


def test_the_cli_prints_the_estimate(live_url: str, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text": "def g(x): return x"}\n{"text": "print(1)"}\n')
    result = CliRunner().invoke(cli, ["estimate", str(prompts), "--url", live_url, "--tokens-per-s", "5000"])
    assert result.exit_code == 0, result.output
    assert "stored bytes" in result.output and "GPU-hours" in result.output and "5,000 tok/s" in result.output
