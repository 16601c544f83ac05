"""The `hsstore` command line against a real server: operators' warm run, windows, jobs, get, compare, audit."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hsstore.cli import app
from schemas.model_revision import model_revision
from schemas.prompt_hash import prompt_hash
from tests.conftest import coding_prompts

runner = CliRunner()


def run(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_devmodel(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = run("devmodel", str(tmp_path / "m"))
    assert model_revision(tmp_path / "m") == model_revision(tiny_model_dir) and "sha256:" in out


def test_operator_warm_run_then_get_compare_audit(live_url: str, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in coding_prompts()[:4]))
    out = run("warm", str(prompts), "--url", live_url, "--backend", "torch", "--layers", "1,3")
    assert "done: 4 new, 0 already stored, 0 failed" in out
    again = run("warm", str(prompts), "--url", live_url, "--backend", "torch", "--layers", "1,3")
    assert "done: 0 new, 4 already stored, 0 failed, 0 tokens extracted" in again
    assert "done" in run("jobs", "--url", live_url)
    assert "always" in run("window", "status", "--url", live_url)
    key = prompt_hash(coding_prompts()[0])
    assert "(verified)" in run("get", key, "--url", live_url, "--out", str(tmp_path / "x.safetensors"))
    assert (tmp_path / "x.safetensors").stat().st_size > 0
    assert "100.00%" in run("compare", key, "--url", live_url, "--a", "torch", "--b", "torch")
    assert "4/4 reproduced bit for bit" in run("audit", "--sample", "4", "--url", live_url)
    assert key[:10] in run("entries", "--url", live_url)  # listings print unique prefixes (see test_cli_ids)
