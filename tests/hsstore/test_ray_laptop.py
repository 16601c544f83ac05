"""The guide's Ray recipe for a laptop, run as written in a script of its own (its own two-CPU Ray cluster) against
what `make demo` leaves and a server on the demo's store; a pool the cluster cannot place refused at once, naming
what is missing; a refused row named by its id."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from client.training.ray_pools import PoolDoesNotFit
from hsstore.demo_prompts import PROMPTS
from hsstore.ray_stage import extract_rows, extract_samples
from schemas.api import ExtractRequest
from service.main import build_services, create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import REPO, LiveServer

GUIDE = (REPO / "docs" / "guide.md").read_text()


def laptop_blocks() -> list[str]:
    """The guide's Python blocks that run on the demo's store: the stage's, then the source's."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, flags=re.S)
    chosen = [b for b in blocks if 'data_dir=".demo/data"' in b or 'read_features("http://127.0.0.1:8000"' in b]
    assert len(chosen) == 2, "the guide's laptop recipe: the stage, then the source"
    return chosen


@pytest.mark.ray  # a cluster of the script's own
def test_the_laptop_recipe_runs_as_written(
    tiny_model_dir: Path, tiny_loaded: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = tmp_path / ".demo"
    demo.mkdir()
    (demo / "model").symlink_to(tiny_model_dir)
    (demo / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    settings = Settings(data_dir=demo / "data", model_dir=demo / "model", device="cpu")
    made = build_services(settings, tiny_loaded)  # what `make demo` stored: the ten prompts, default featureset
    made.writer.extract(ExtractRequest(samples=list(PROMPTS)), run_now=True)
    made.close()

    with LiveServer(create_app(settings, tiny_loaded)) as url:  # the README's by-hand `hsstore serve`
        script = "\n".join(laptop_blocks()).replace("http://127.0.0.1:8000", url)
        # a Ray cluster of the script's own (never the test session's), as on a laptop where none runs
        env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    stored = [line.split() for line in lines if line.split()[-1:] in (["existing"], ["extracted"])]
    assert sorted(row[0] for row in stored) == sorted(p["id"] for p in PROMPTS)
    assert {row[2] for row in stored} == {"existing"}  # the demo stored them: the same keys through Ray
    shapes = [line for line in lines if line.startswith("(")]
    assert len(shapes) == 3 and all(", 5, 64)" in line for line in shapes), lines  # 10 entries in batches of 4


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize(
    ("asked", "said"),
    [
        ({"concurrency": 2, "num_gpus": 0}, "2 actors of 1 CPU and one CPU to read the samples need 3 CPUs"),
        ({"concurrency": 1, "num_gpus": 1}, "the cluster has 0: on a CPU cluster pass num_gpus=0"),
        ({"concurrency": (2, 4), "num_gpus": 0, "num_cpus": 0.5}, None),  # 2 x 0.5 + 1 fits two CPUs
        ({"concurrency": 2, "num_gpus": 0, "items": True}, None),  # from_items: the blocks are there, no reading
    ],
)
def test_a_pool_the_cluster_cannot_place_is_refused_at_once(asked: dict, said: str | None, tmp_path: Path) -> None:
    jsonl = tmp_path / "samples.jsonl"  # read by Ray's tasks: a CPU beside the actors
    jsonl.write_text(json.dumps({"text": "x"}) + "\n")
    samples = ray.data.from_items([{"text": "x"}]) if asked.pop("items", False) else ray.data.read_json(str(jsonl))
    if said is None:
        extract_samples(samples, settings=Settings(model_dir=Path("m")), **asked)  # lazy: nothing runs yet
        return
    with pytest.raises(PoolDoesNotFit, match=re.escape(said)):  # before Ray schedules anything: no wait to bound
        extract_samples(samples, settings=Settings(model_dir=Path("m")), **asked)


@pytest.mark.usefixtures("local_ray")
def test_a_refused_row_is_named_by_its_id_not_by_its_place_in_a_batch(
    settings: Settings, tiny_loaded: LoadedModel
) -> None:
    rows = [{"id": "fine", "text": "def ok(): pass"}, {"id": "empty", "text": ""}, {"text": "", "completion": None}]
    services = build_services(settings, tiny_loaded)
    try:
        (batch,) = ray.data.from_items(rows).iter_batches(batch_format="pyarrow", batch_size=3)
        out = extract_rows(services.writer, batch, None, "auto").to_pylist()
    finally:
        services.close()
    assert [row["status"] for row in out] == ["extracted", "failed", "failed"]
    assert out[1]["error"].startswith("row id 'empty': ") and "text" in out[1]["error"]
    assert out[2]["error"].startswith("row with prompt_hash ")
    assert not any("samples[" in (row["error"] or "") for row in out)
