"""An API replica learns its model's revision from what the hosts that hashed the weights recorded in the catalog,
so its model directory needs only the config and tokenizer; where nothing (or two revisions) is recorded, it hashes
weights it has, and without weights it refuses to start, saying what to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from schemas.model_revision import model_revision
from service.errors import ConfigError
from service.main import build_services
from service.settings import Settings


def _without_weights(model_dir: Path, to: Path) -> Path:
    shutil.copytree(model_dir, to, ignore=shutil.ignore_patterns("*.safetensors"))
    return to


def _revision(settings: Settings) -> str:
    services = build_services(settings)
    try:
        assert services.models is not None and not services.models.loaded  # a replica never loads weights here
        return services.models.spec.revision
    finally:
        services.close()


def test_a_replica_takes_the_revision_a_worker_recorded_and_needs_no_weights(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    light = _without_weights(tiny_model_dir, tmp_path / "config-and-tokenizer")
    replica = Settings(data_dir=store, model_dir=light, device="cpu", run_jobs=False)
    with pytest.raises(ConfigError, match="no worker has recorded the revision"):
        _revision(replica)  # nothing recorded yet, and no weights to hash

    worker = Settings(data_dir=store, model_dir=tiny_model_dir, device="cpu", load_on_start=False)
    assert _revision(worker) == model_revision(tiny_model_dir)  # a host that runs jobs hashes, and records
    assert _revision(replica) == model_revision(tiny_model_dir)  # learned: the replica has no weights at all


def test_two_weight_sets_behind_one_config_leave_the_replica_to_hash_its_own(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    retrained = tmp_path / "retrained"
    shutil.copytree(tiny_model_dir, retrained)
    weights = next(retrained.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes() + b" ")  # other bytes, same config and tokenizer
    for model_dir in (tiny_model_dir, retrained):
        _revision(Settings(data_dir=store, model_dir=model_dir, device="cpu", load_on_start=False))
    light = _without_weights(tiny_model_dir, tmp_path / "config-and-tokenizer")
    with pytest.raises(ConfigError, match="workers recorded 2 revisions for its config and tokenizer"):
        _revision(Settings(data_dir=store, model_dir=light, device="cpu", run_jobs=False))
    replica = Settings(data_dir=store, model_dir=retrained, device="cpu", run_jobs=False)
    assert _revision(replica) == model_revision(retrained)
