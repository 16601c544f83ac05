"""`hsstore verify` finds every kind of damage, marks it, and the mark holds everywhere: listings and HEAD say so,
reads refuse it, an audit reads the stored bytes too, and re-extracting repairs it. An interrupted scrub resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from client import FeatureClient, IntegrityError
from hsstore.cli import app as cli
from service.main import build_services
from service.settings import Settings
from tests.conftest import LiveServer


def blob_dir(settings: Settings, content_hash: str) -> Path:
    digest = content_hash.removeprefix("sha256:")
    return settings.data_dir / "blobs" / digest[:2] / digest


def shard(blob: Path, array: str = "hidden_states") -> Path:
    return next(p for p in (blob / array).rglob("*") if p.is_file() and p.name != "zarr.json")


def flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x10
    path.write_bytes(raw)


DAMAGE = {
    "a flipped chunk byte": lambda blob: flip(shard(blob), 40),
    "a truncated shard": lambda blob: shard(blob).write_bytes(shard(blob).read_bytes()[:-30]),
    "a deleted shard": lambda blob: shard(blob).unlink(),
    "a changed array shape": lambda blob: (blob / "input_ids" / "zarr.json").write_text(
        json.dumps({**json.loads((blob / "input_ids" / "zarr.json").read_text()), "shape": [2]})
    ),
    "a deleted blob": shutil.rmtree,
}


def test_verify_finds_each_kind_of_damage_and_the_mark_holds(app: FastAPI, settings: Settings) -> None:
    samples = [{"text": f"verify {name} " * 5} for name in [*DAMAGE, "intact"]]
    with LiveServer(app) as url, FeatureClient(url) as client, httpx.Client(base_url=url) as http:
        manifests = [r.manifest for r in client.extract(samples).results]
        for damage, manifest in zip(DAMAGE.values(), manifests, strict=False):
            damage(blob_dir(settings, manifest.content_hash))

        result = CliRunner().invoke(cli, ["verify", str(settings.data_dir), "--restart"])
        assert result.exit_code == 1, result.output
        assert "6 versions checked" in result.stderr and "1 intact, 5 corrupt" in result.stderr
        assert result.stdout.count("CORRUPT") == 5

        listed = {m.prompt_hash: m for m in client.entries()}
        for manifest in manifests[:-1]:
            assert listed[manifest.prompt_hash].integrity.status == "corrupt"
            head = http.head(f"/v1/features/{manifest.prompt_hash}")
            assert head.status_code == 500 and head.headers["x-hsstore-error"] == "corrupt_entry"
            with pytest.raises(IntegrityError, match="found corrupt"):
                client.get(prompt_hash=manifest.prompt_hash)
        assert listed[manifests[-1].prompt_hash].integrity.status == "intact"
        assert client.get(prompt_hash=manifests[-1].prompt_hash).full

        audit = client.audit(10)  # reads the stored bytes as well as re-extracting
        assert sorted(r.stored for r in audit.results) == ["corrupt"] * 5 + ["intact"]
        assert audit.reproduced == 1

        client.extract(samples[:-1], force=True)  # the same bits again: the blobs are rewritten
        for manifest in manifests[:-1]:
            assert client.get(prompt_hash=manifest.prompt_hash).content_hash == manifest.content_hash
        again = CliRunner().invoke(cli, ["verify", str(settings.data_dir), "--restart"])
        assert again.exit_code == 0 and "6 intact, 0 corrupt" in again.stderr


def test_an_interrupted_scrub_resumes_where_it_stopped(app: FastAPI, settings: Settings) -> None:
    with LiveServer(app) as url, FeatureClient(url) as client:
        client.extract([{"text": f"scrub {i}"} for i in range(5)])
    services = build_services(settings.model_copy(update={"model_dir": None}))

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        services.verifier.scrub(on_checked=stop_after_two)
    resumed = services.verifier.scrub()
    assert (resumed.checked, resumed.resumed_after) == (3, 2)
    assert services.verifier.scrub().checked == 5  # a finished pass starts the next one over
    assert services.verifier.scrub(sample=2, seed=0).checked == 2
    services.close()
