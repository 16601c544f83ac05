"""The deploy files stay true to the code: every HSSTORE_* variable they set is a setting (and the example values
parse), every command they run is a CLI command with those options, the compose file has the cluster's parts.
(No container runtime here: the images themselves are not built in CI.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hsstore.cli import app
from service.settings import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
FILES = sorted(p for p in DEPLOY.rglob("*") if p.is_file())


def _variables(text: str) -> set[str]:
    return set(re.findall(r"HSSTORE_[A-Z0-9_]+", text))


def _env_file(path: Path) -> dict[str, str]:
    """NAME=value lines, as systemd's EnvironmentFile reads them."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_every_variable_is_a_setting() -> None:
    fields = {f"HSSTORE_{name.upper()}" for name in Settings.model_fields} | {
        "HSSTORE_CONFIG",
        "HSSTORE_MODEL_HOST_DIR",
    }
    for path in FILES:
        unknown = _variables(path.read_text()) - fields
        assert not unknown, f"{path.name} sets {unknown}, which no setting reads"


def test_the_example_environment_parses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in _env_file(DEPLOY / "hsstore.env.example").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HSSTORE_DATA_DIR", str(tmp_path))
    settings = Settings()
    assert settings.store_url == "s3://hsstore/features" and settings.catalog_url.startswith("postgresql://")
    assert settings.windows == ["Mon-Fri 02:00-03:30 UTC"] and settings.lease_s == 60


def test_the_compose_file_has_the_cluster() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"minio", "postgres", "api1", "api2", "worker-gpu0"} <= set(services)
    for api in ("api1", "api2"):
        assert services[api]["environment"]["HSSTORE_RUN_JOBS"] == "false"
    assert services["worker-gpu0"]["command"][:2] == ["hsstore", "worker"]
    shared = services["api1"]["environment"]
    assert shared["HSSTORE_STORE_URL"].startswith("s3://") and shared["HSSTORE_CATALOG_URL"].startswith("postgresql")


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_the_commands_the_units_run_exist(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    for path in FILES:
        for line in re.findall(rf"hsstore {command}[^\n\"]*", path.read_text()):
            for option in re.findall(r"--[a-z-]+", line):
                assert option in result.output, f"{path.name}: `{line}` uses {option}, which `hsstore {command}` lacks"
