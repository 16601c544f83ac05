"""The README's snippets, then the guide's, run as written against the demo's store: their shell commands through the
CLI, their Python through the client (the URL pointed at a live server over the demo's model and samples)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hsstore.cli import app
from hsstore.demo_prompts import PROMPTS
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
GUIDE = (REPO / "docs" / "guide.md").read_text()
DOCS = README + GUIDE  # in the order a reader meets them


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS, flags=re.S)


@pytest.fixture
def demo_store(live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """What `make demo` leaves: the ten prompts extracted with the defaults, and .demo/prompts.jsonl."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".demo").mkdir()
    (tmp_path / ".demo" / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    result = CliRunner().invoke(app, ["extract", ".demo/prompts.jsonl", "--url", live_url])
    assert result.exit_code == 0, result.output
    return live_url


def test_the_snippets_run_in_order_against_the_demo_twice(demo_store: str) -> None:
    """Every bash and Python block of the README and the guide in the order a reader meets them, on one store; then
    all of it again, since a reader who runs them a second time must get no error either."""
    steps: list[str | object] = []  # a shell command, or the client snippet compiled against the demo's URL
    for language, block in re.findall(r"```(bash|python)\n(.*?)```", DOCS, flags=re.S):
        if language == "python" and "FeatureClient(" in block:
            steps.append(compile(block.replace("http://127.0.0.1:8000", demo_store), "README.md or guide.md", "exec"))
        elif language == "bash":
            steps += [line.split("#")[0].strip() for line in block.splitlines() if line.strip().startswith("hsstore ")]
    commands = [step for step in steps if isinstance(step, str)]
    assert len(commands) >= 8 and len(steps) == len(commands) + 2  # and the two client snippets
    runner = CliRunner()
    for attempt in ("first", "second"):
        for step in steps:
            if not isinstance(step, str):
                exec(step, {})
                continue
            result = runner.invoke(app, shlex.split(step)[1:], env={"HSSTORE_URL": demo_store, "COLUMNS": "80"})
            assert result.exit_code == 0, (attempt, step, result.output)


def test_the_sample_examples_are_valid_samples() -> None:
    from schemas.samples import parse_sample

    (examples,) = [b for b in blocks("json") if '"messages"' in b]
    for line in examples.splitlines():
        parse_sample(json.loads(line))
