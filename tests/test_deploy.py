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
        "HSSTORE_TOKEN",  # the client's, not the service's
    }
    for path in FILES:
        unknown = _variables(path.read_text()) - fields
        assert not unknown, f"{path.name} sets {unknown}, which no setting reads"


def test_the_example_environment_parses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in _env_file(DEPLOY / "hsstore.env.example").items():
        monkeypatch.setenv(name, value)
    catalog_url = _env_file(DEPLOY / "hsstore.secrets.env.example")["HSSTORE_CATALOG_URL"]
    monkeypatch.setenv("HSSTORE_CATALOG_URL", catalog_url)  # the secrets file gives it
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
    assert shared["HSSTORE_STORE_URL"].startswith("s3://") and services["api1"]["env_file"] == ["hsstore.secrets.env"]
    secrets = _env_file(DEPLOY / "hsstore.secrets.env.example")
    assert secrets["HSSTORE_CATALOG_URL"].startswith("postgresql://")


@pytest.mark.parametrize("command", ["serve", "worker", "migrate", "workers"])
def test_the_commands_the_units_run_exist(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    for path in FILES:
        for line in re.findall(rf"hsstore {command}[^\n\"]*", path.read_text()):
            for option in re.findall(r"--[a-z-]+", line):
                assert option in result.output, f"{path.name}: `{line}` uses {option}, which `hsstore {command}` lacks"


def test_the_examples_ship_no_working_token_and_an_exposed_service_needs_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secrets = _env_file(DEPLOY / "hsstore.secrets.env.example")
    assert set(secrets) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HSSTORE_CATALOG_URL", "HSSTORE_TOKENS"}
    assert "sslmode=" in secrets["HSSTORE_CATALOG_URL"]
    monkeypatch.setenv("HSSTORE_TOKENS", secrets["HSSTORE_TOKENS"])
    with pytest.raises(ValueError, match="is not sha256: \\+ 64 lowercase hex"):
        Settings(data_dir=tmp_path)  # the placeholders are refused: nobody starts with a guessable token
    monkeypatch.delenv("HSSTORE_TOKENS")
    for name, value in _env_file(DEPLOY / "hsstore.env.example").items():
        monkeypatch.setenv(name, value)
    shared = Settings(data_dir=tmp_path)
    assert shared.host == "0.0.0.0" and shared.exposed_without_auth  # so it refuses to start without tokens
    assert not shared.model_copy(update={"tokens": {"sha256:" + "0" * 64: ["read"]}}).exposed_without_auth
    toml = (DEPLOY / "hsstore.example.toml").read_text()
    assert "[tokens]" not in toml and not re.search(r"sha256:[0-9a-f]{64}", toml)
    for path in FILES:  # no secret in anything committed: compose and the env file take them from *.secrets.env
        text = path.read_text()
        assert not re.search(r"(PASSWORD|SECRET_ACCESS_KEY)[=:] *(?!replace)[A-Za-z0-9]", text), path.name


def test_every_hsstore_process_in_compose_has_health_restart_and_state() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    assert services["migrate"]["command"] == ["hsstore", "migrate"]
    for name in ("api1", "api2", "worker-gpu0"):
        service = services[name]
        check = service["healthcheck"]
        assert {"interval", "start_period", "retries"} <= set(check), name
        assert service["restart"] == "unless-stopped"
        assert any(v.endswith(":/var/lib/hsstore") for v in service["volumes"]), name
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        assert service["env_file"] == ["hsstore.secrets.env"]
    port = services["api1"]["environment"]["HSSTORE_PORT"]
    assert f"127.0.0.1:{port}/readyz" in " ".join(services["api1"]["healthcheck"]["test"])
    from hsstore.cli.run import WORKER_HEARTBEAT

    assert f"/var/lib/hsstore/{WORKER_HEARTBEAT}" in services["worker-gpu0"]["healthcheck"]["test"][1]
    for dockerfile in ("Dockerfile", "Dockerfile.serve", "Dockerfile.worker"):
        text = (DEPLOY / dockerfile).read_text()
        assert "USER hsstore" in text and "VOLUME /var/lib/hsstore" in text and "HEALTHCHECK" in text, dockerfile
        assert "accelerate" not in text
    gpu_bases = {
        re.search(r"^FROM (\S+)", (DEPLOY / f).read_text(), re.M)[1] for f in ("Dockerfile", "Dockerfile.worker")
    }
    assert len(gpu_bases) == 1  # one stack for every process that runs the model
    for text in ((DEPLOY / "Dockerfile").read_text(), (DEPLOY / "Dockerfile.worker").read_text()):
        assert "--no-build-isolation causal-conv1d==1.7.0" in text and "flash-linear-attention==0.6.0" in text
    guide = (DEPLOY / "README.md").read_text()
    assert "--no-build-isolation causal-conv1d==1.7.0" in guide and "flash-linear-attention==0.6.0" in guide
