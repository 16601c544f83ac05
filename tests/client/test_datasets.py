"""Dataset snapshots end to end: created from keys or listing filters, named once, read back verified by id (from
the cache directory without a request), damage refused, and a DataLoader over one reading exactly its versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.utils.data import DataLoader
from typer.testing import CliRunner

from client import (
    EntryStream,
    FeatureClient,
    IntegrityError,
    NameTakenError,
    NotFoundError,
    pad_collate,
)
from hsstore.cli import app


@pytest.fixture
def stored(client: FeatureClient) -> list:
    samples = [{"id": f"d{i}", "text": "def dataset_entry(x): return x " * (i + 1)} for i in range(6)]
    client.extract(samples, featureset=["embed", 1, 2])
    return sorted(client.entries(), key=lambda m: m.seq)


def test_a_dataset_names_exactly_its_versions(client: FeatureClient, stored: list, settings) -> None:
    chosen = [{"prompt_hash": m.prompt_hash} for m in stored[:4]]
    info = client.create_dataset("first-four", chosen)
    assert info.entries == 4 and info.tokens == sum(m.num_tokens for m in stored[:4])
    index = client.dataset("first-four")
    assert index.dataset_id == info.dataset_id
    assert [index.key(i) for i in range(4)] == [m.feature_key() for m in stored[:4]]
    assert client.create_dataset("first-four", chosen) == info  # the same entries again: the same snapshot
    with pytest.raises(NameTakenError, match="already names"):
        client.create_dataset("first-four", chosen[:2])
    everything = client.create_dataset("all", featureset=stored[0].featureset_id)
    assert everything.entries == len(stored)
    with pytest.raises(NotFoundError):
        client.dataset("no-such-dataset")
    with pytest.raises(ValueError):  # the contract's model refuses it before sending
        client.create_dataset("bad name!", chosen)
    answered = client._http.post("/v1/datasets", json={"name": "bad name!", "keys": chosen})
    assert answered.status_code == 422 and answered.json()["error"]["code"] == "invalid_request"
    # a damaged index in the store is refused on receipt, never accepted
    path = settings.data_dir / "datasets" / f"{info.dataset_id.removeprefix('sha256:')}.hsds"
    damaged = bytearray(path.read_bytes())
    damaged[-2] ^= 1
    path.write_bytes(damaged)
    with pytest.raises(IntegrityError, match="damaged in the store"):
        client.dataset(info.dataset_id)


def test_a_dataset_id_is_read_from_the_cache_without_asking(
    client: FeatureClient, stored: list, tmp_path: Path
) -> None:
    info = client.create_dataset("cached", [{"prompt_hash": m.prompt_hash} for m in stored])
    with FeatureClient(client.url, cache=tmp_path / "cache") as cached:
        cached.dataset(info.dataset_id)
    kept = tmp_path / "cache" / "datasets" / f"{info.dataset_id.removeprefix('sha256:')}.hsds"
    assert kept.is_file()
    with FeatureClient("http://127.0.0.1:9", cache=tmp_path / "cache") as offline:  # nothing listens there
        assert len(offline.dataset(info.dataset_id)) == len(stored)
    damaged = bytearray(kept.read_bytes())
    damaged[-1] ^= 1
    kept.write_bytes(damaged)
    with FeatureClient(client.url, cache=tmp_path / "cache") as cached:  # dropped, fetched again
        assert len(cached.dataset(info.dataset_id)) == len(stored)


def test_a_dataloader_over_a_dataset_reads_each_version_once(client: FeatureClient, stored: list) -> None:
    info = client.create_dataset("loader", [{"prompt_hash": m.prompt_hash} for m in stored])
    stream = EntryStream.of_dataset(client.url, info.dataset_id, seed=3, prefetch=2)
    loader = DataLoader(stream, batch_size=2, num_workers=2, collate_fn=pad_collate)
    seen = [h for batch in loader for h in batch["content_hash"]]
    assert sorted(seen) == sorted(m.content_hash for m in stored) and len(seen) == len(set(seen))


def test_the_cli_creates_and_shows_datasets(client: FeatureClient, stored: list, tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.write_text("".join(json.dumps({"prompt_hash": m.prompt_hash, "tokens": 1}) + "\n" for m in stored[:3]))
    runner = CliRunner()
    made = runner.invoke(app, ["dataset", "create", "from-cli", "--keys", str(keys), "--url", client.url, "--json"])
    assert made.exit_code == 0, made.output
    info = json.loads(made.output)
    assert info["entries"] == 3
    shown = runner.invoke(app, ["dataset", "show", "from-cli", "--url", client.url])
    assert shown.exit_code == 0 and info["dataset_id"] in shown.output
