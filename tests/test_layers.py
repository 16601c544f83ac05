"""The layering is held by tools, not by care: import-linter's contracts (pyproject.toml) and a cycle check over
every module. Each is also shown to fail when an upward import or a cycle is planted in a copy of the tree."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("schemas", "compute", "service", "client", "hsstore")


def import_cycles(root: Path) -> list[list[str]]:
    """Groups of modules under `root` that import each other, directly or through others (in a fresh process, so
    the tree read is `root`'s and not what this process imported)."""
    done = subprocess.run(
        # -P: not the script's own folder first on the path (tests/ has folders named like the packages)
        [sys.executable, "-P", str(REPO / "tests" / "support" / "import_cycles.py"), *PACKAGES],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--config",
            str(REPO / "pyproject.toml"),
            "--no-cache",
        ],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def plant(root: Path, module: str, line: str) -> Path:
    """A copy of the tree with `line` added to `module`."""
    planted = root.parent / f"{root.name}-planted-{module.replace('/', '-')}"
    shutil.rmtree(planted, ignore_errors=True)
    shutil.copytree(root, planted)
    path = planted / module
    path.write_text(path.read_text() + f"\n{line}\n")
    return planted


def test_the_layers_hold() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout + done.stderr


def test_no_module_imports_itself_through_others() -> None:
    assert import_cycles(REPO) == []


def test_an_upward_import_breaks_the_contract(copy_of_the_tree: Path) -> None:
    planted = plant(copy_of_the_tree, "service/storage/protocol.py", "import service.core.read.reader  # noqa")
    done = lint_imports(planted)
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout


def test_a_planted_cycle_is_found(copy_of_the_tree: Path) -> None:
    planted = plant(copy_of_the_tree, "service/core/gpu_time/gate.py", "import service.core.write.writer  # noqa")
    cycles = import_cycles(planted)
    assert any("service.core.gpu_time.gate" in group and "service.core.write.writer" in group for group in cycles), (
        cycles
    )


def test_torch_in_the_contract_breaks_it(copy_of_the_tree: Path) -> None:
    # a lazy import counts: a function of schemas/ that imports torch would make the contract need it
    planted = plant(copy_of_the_tree, "schemas/tokens.py", "def _f() -> None:\n    import torch  # noqa")
    done = lint_imports(planted)
    assert done.returncode != 0 and "no torch" in done.stdout and "BROKEN" in done.stdout, done.stdout
