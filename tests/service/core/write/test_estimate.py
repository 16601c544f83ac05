"""The estimate, before anything runs, against what an extraction then stores: tokens exact, bytes within 10% on
the demo's prompts; the CLI prints it; bad samples are refused as extraction refuses them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from client import BackendUnavailableError, FeatureClient, FeatureSet, InvalidRequestError, SampleRejectedError
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
    actual = _stored_bytes(app.state.services, manifests)
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


def test_recipes_are_estimated_as_their_union_beside_each_on_its_own(
    client: FeatureClient, live_url: str, tmp_path: Path
) -> None:
    prompts = coding_prompts()[:4]
    recipes = [[1, 4, 6], [2, 4, 6], [1, 5, 6]]
    report = client.estimate(prompts, recipes=recipes, backends=["torch"], tokens_per_s=1000.0)
    union = client.estimate(prompts, featureset=[1, 2, 4, 5, 6], backends=["torch"], tokens_per_s=1000.0)
    assert report.featureset_id == union.featureset_id and report.raw_bytes == union.raw_bytes
    alone = [client.estimate(prompts, featureset=r, backends=["torch"], tokens_per_s=1000.0) for r in recipes]
    assert [c.raw_bytes for c in report.recipes] == [a.raw_bytes for a in alone]
    assert [c.featureset_id for c in report.recipes] == [a.featureset_id for a in alone]
    assert all(c.gpu_hours == report.gpu_hours for c in report.recipes)  # each recipe is a forward of its own
    assert report.raw_bytes < sum(c.raw_bytes for c in report.recipes)  # layers 4 and 6 are stored once
    with pytest.raises(InvalidRequestError, match="one dtype"):
        client.estimate(prompts, recipes=[[1], FeatureSet(layers=[2], dtype="float8_e4m3fn")])
    prompts_file = tmp_path / "prompts.jsonl"
    prompts_file.write_text('{"text": "def g(x): return x"}\n')
    args = ["estimate", str(prompts_file), "--url", live_url, "--recipe", "1,4,6", "--recipe", "2,4,6"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "the union" in result.output and "recipes one by one" in result.output and "2 extractions" in result.output
