"""hsstore as speculators' hidden-states backend (#62), with the real hs-connectors 0.9.0 and speculators 0.9.0's own
trainer (tests/support/speculators_train.py: its CLI's config resolution and backend registry, ArrowDataset, collate,
EAGLE-3 draft model, Trainer and optimizer, on the CPU), in the environment scripts/speculators-for-tests.sh builds
(`make test` builds it; the guide's install recipe): the backend is found through the `.pth` hook alone.

One data folder of rows as speculators' prepare step writes them (input_ids, loss_mask, seq_len); half of the rows
stored beforehand. Trained on the store, the other half is extracted through the service (one warm job) and stored;
the losses of every step equal, bit for bit, those of training on the same entries exported to speculators' files
(`hsstore export --format speculators`) and read by its own file backend; a second run extracts nothing; a run pinned
to a snapshot reads the same; layers that do not end with the final one, and a snapshot that lacks a row, are
refused before the first step."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import datasets
import httpx
import pytest
import torch

from client import FeatureClient
from client.exchange.exporting import ExportChoice, export
from schemas.exchange import ExchangeFormat
from schemas.featureset import FeatureSet
from schemas.prompt_hash import prompt_hash
from tests.conftest import REPO
from tests.support.processes import outputs_of

ENVIRONMENT = REPO / ".venv-speculators"
STAMP = ENVIRONMENT / ".installed-speculators-0.9.0"
FEATURESET = FeatureSet(layers=[1, 3, 5, 7])  # the tiny model's 8 layers: three for the draft, then the final one
ROWS = 12
GUIDE = (REPO / "docs" / "guide.md").read_text()


@pytest.fixture(scope="module")
def python() -> Path:
    if not STAMP.exists():
        pytest.fail("speculators' environment is missing: scripts/speculators-for-tests.sh builds it (make test does)")
    return ENVIRONMENT / "bin" / "python"


def _rows() -> list[dict]:
    generator = torch.Generator().manual_seed(62)
    rows = []
    for i in range(ROWS):
        tokens = 17 + 5 * i
        ids = torch.randint(3, 1024, (tokens,), generator=generator).tolist()
        prompt = 4 + i % 5  # the loss on the completion only, as prepare_data's masks do
        rows.append({"input_ids": ids, "loss_mask": [0] * prompt + [1] * (tokens - prompt), "seq_len": tokens})
    return rows


def _guide_flags() -> list[str]:
    """The backend's flags as the guide's recipe gives them (its URL and layers are the demo's)."""
    block = re.search(r"speculators train (.*?)\n```", GUIDE, flags=re.S)
    assert block, "the guide's speculators recipe"
    words = block.group(1).replace("\\\n", " ").split()
    start = words.index("--hidden-states-backend")
    flags = [w for w in words[start:] if not w.startswith("#")]
    return flags[: flags.index("--hsstore-layers") + 2]


def _start(python: Path, data: Path, save: Path, backend: list[str]) -> subprocess.Popen[str]:
    command = [
        str(python),
        str(REPO / "tests" / "support" / "speculators_train.py"),
        str(save.with_suffix(".json")),  # the losses, step by step
        "--",
        *["--speculator-type", "eagle3", "--verifier-name-or-path", str(data.parent / "model")],
        *["--data-path", str(data), "--save-path", str(save), "--log-dir", str(save / "logs")],
        *["--target-layer-ids", "2", "4", "6", "--draft-attn-impl", "sdpa", "--loss-implementation", "eager"],
        *["--hidden-states-dtype", "float32", "--total-seq-len", "96", "--train-data-ratio", "0.75"],
        # one loader worker: speculators spawns its workers, so the backend crosses a pickle into a fresh process as
        # it does with more (each costs a full import of torch and speculators, ~10 s here)
        *["--epochs", "2", "--num-workers", "1", "--seed", "0", "--lr", "3e-3"],
        *backend,
    ]
    return subprocess.Popen(command, cwd=data.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _train(python: Path, data: Path, runs: dict[str, list[str]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """The trainer with each of `runs`' backend flags, side by side, each saving under the data folder's parent."""
    started = {name: _start(python, data, data.parent / name, backend) for name, backend in runs.items()}
    outputs = outputs_of(started, timeout=600)
    return {
        name: subprocess.CompletedProcess(run.args, run.returncode, *outputs[name]) for name, run in started.items()
    }


def _losses(done: subprocess.CompletedProcess[str], save: Path) -> list[float]:
    assert done.returncode == 0, done.stderr[-4000:]
    return [step["loss"] for step in json.loads(save.with_suffix(".json").read_text())]


def _jobs(http: httpx.Client) -> int:
    return len(http.get("/v1/jobs").json())


def test_the_trainer_reads_the_store_as_it_reads_exported_files(
    python: Path, live_url: str, client: FeatureClient, http: httpx.Client, tiny_model_dir: Path, tmp_path: Path
) -> None:
    rows = _rows()
    samples = [{"token_ids": row["input_ids"]} for row in rows]
    (tmp_path / "model").symlink_to(tiny_model_dir)
    data = tmp_path / "data"
    datasets.Dataset.from_list(rows).with_format("torch").save_to_disk(str(data))
    client.extract(samples[: ROWS // 2], featureset=FEATURESET)  # half stored beforehand

    flags = _guide_flags()
    store = [*flags[: flags.index("--hsstore-url") + 1], live_url, "--hsstore-layers", "1,3,5,7"]
    on_store = _losses(_train(python, data, {"store": store})["store"], tmp_path / "store")
    assert len(on_store) >= 4 and all(loss > 0 for loss in on_store)
    # cache-through that caches: every row stored now, the missing half by one job
    assert all(client.exists(sample, featureset=FEATURESET) for sample in samples)
    assert _jobs(http) == 1

    manifests = [next(client.entries(prompt_hash=prompt_hash(s), featureset=FEATURESET.id)) for s in samples]
    chosen = ExportChoice.of(manifests)  # in the rows' order
    export(client, chosen, ExchangeFormat.SPECULATORS, tmp_path / "export", num_layers=8)
    client.create_dataset("speculators-run", [key.key() for key in chosen.keys])
    client.create_dataset("one-short", [key.key() for key in chosen.keys[:-1]])
    files = ["--hidden-states-backend", "file", "--hidden-states-path", str(tmp_path / "export" / "hidden_states")]
    not_final = [*store[:-1], "1,3,5"]  # the draft's layers without the final one, which speculators splits off
    runs = {  # side by side: each reads what is stored by now, and each process spends most of its time importing
        "files": files,  # the same entries exported to speculators' files, read by its own file backend
        "again": store,  # a second run on the store
        "pinned": [*store, "--hsstore-dataset", "speculators-run"],
        "not-final": not_final,
        "short": [*store, "--hsstore-dataset", "one-short"],
    }
    done = _train(python, data, runs)

    assert _losses(done["files"], tmp_path / "files") == on_store  # bit for bit: the same tensors reach the trainer
    assert _losses(done["again"], tmp_path / "again") == on_store
    assert _losses(done["pinned"], tmp_path / "pinned") == on_store
    assert _jobs(http) == 1  # no later run extracted anything
    refused = done["not-final"]
    assert refused.returncode != 0 and "--hsstore-layers must end with the final layer (7 of this 8-layer" in (
        refused.stderr
    )
    short = done["short"]
    assert short.returncode != 0
    assert f"1 of {ROWS} rows of the data folder are not in dataset one-short (the first: row {ROWS - 1})" in (
        short.stderr
    )
