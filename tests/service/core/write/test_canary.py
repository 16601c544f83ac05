"""One truth per key: the first extraction under a (model revision, backend, policy) records a canary sample's bits;
after every later model load the canary is extracted again, and other bits (here: weights changed in place, as a
library upgrade or a faulty GPU would change them) refuse extraction under that key space, naming nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from schemas.api import ExtractRequest
from schemas.keys import EntryFilter
from service.core.write.canary import CanaryMismatch
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings


def _extract(settings: Settings, loaded: LoadedModel, text: str) -> int:
    services = build_services(settings, loaded)  # a model load, as far as the canary is concerned
    try:
        return services.writer.extract(ExtractRequest(samples=[{"text": text}]), run_now=True).extracted
    finally:
        services.close()


def _stored(settings: Settings) -> int:
    services = build_services(settings)
    try:
        return len(services.versions.find(EntryFilter()))
    finally:
        services.close()


def test_other_bits_after_a_load_refuse_extraction_under_the_key_space(
    tmp_path: Path, tiny_model_dir: Path, tiny_loaded: LoadedModel
) -> None:
    settings = Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", load_on_start=False)
    assert _extract(settings, tiny_loaded, "def first(): pass") == 1  # records the canary
    services = build_services(settings, tiny_loaded)
    try:
        assert any(name.startswith("canary:") for name in _kv_names(services))
    finally:
        services.close()
    assert _extract(settings, tiny_loaded, "def second(): pass") == 1  # another load, the same canary bits
    weight = tiny_loaded.body.layers[0].mlp.down_proj.weight
    kept = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(1.01)
        with pytest.raises(CanaryMismatch, match="canary sample's bits under model_revision"):
            _extract(settings, tiny_loaded, "def third(): pass")
    finally:
        with torch.no_grad():
            weight.copy_(kept)
    assert _stored(settings) == 2  # nothing was stored under the changed bits
    assert _extract(settings, tiny_loaded, "def third(): pass") == 1  # the weights as recorded: it runs again


def _kv_names(services) -> list[str]:
    database = services.database
    with database.connection() as conn:
        return [row[0] for row in conn.execute("SELECT name FROM kv").fetchall()]
