from __future__ import annotations

from pathlib import Path

import pytest

from service.config_file import CONFIG_ENV
from service.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(REPO / "deploy" / "hsstore.example.toml"))
    settings = Settings()
    assert settings.device == "cuda" and settings.tokens == {}  # tokens come from HSSTORE_TOKENS, not the example
    assert settings.exposed_without_auth  # so, as it ships, it refuses to start on 0.0.0.0 without them
    assert settings.windows_enforced and not settings.preload and settings.handover == "memory_saver"


def test_environment_overrides_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(REPO / "deploy" / "hsstore.example.toml"))
    monkeypatch.setenv("HSSTORE_PORT", "9123")
    assert Settings().port == 9123


def test_unknown_keys_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('data_dirr = "/typo"\n')
    monkeypatch.setenv(CONFIG_ENV, str(bad))
    with pytest.raises(ValueError, match="data_dirr"):
        Settings()


def test_the_heap_is_bounded_where_the_process_extracts_and_left_to_glibc_on_a_replica(tmp_path: Path) -> None:
    """The leak came with extraction; a replica only reads, where the bound's page faults cost per byte."""
    model = {"model_dir": tmp_path / "model", "data_dir": tmp_path}
    assert Settings(**model).heap_bounded and not Settings(data_dir=tmp_path).heap_bounded
    assert Settings(data_dir=tmp_path, heap="bounded").heap_bounded
    assert not Settings(**model, heap="glibc").heap_bounded
