from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import CONFIG_ENV, Settings

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
