"""Registers hsstore's speculators backend as soon as `hs_connectors` is imported (#62).

hs-connectors has no entry points: a backend exists once the module that registers it is imported, and speculators
reads the registry when its config module is imported (its argparse choices and each backend's flags). A `.pth`
file in site-packages (`install()`) runs this file at interpreter start (by path: importing `client` there would
load the client in every process); it adds a finder which, when `hs_connectors` is imported, runs its module and
then imports the backend module. Nothing is imported early: a process that never imports `hs_connectors` pays one
finder lookup per new top-level import.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

PTH_NAME = "hsstore-speculators.pth"
TARGET = "hs_connectors"
BACKEND = "client.training.speculators_backend"


class _After:  # a meta path finder (only find_spec: importlib.abc costs 11 ms at every start)
    """Finds `hs_connectors` as the other finders do, and imports the backend once its module has run. Known by a
    marker, not its class: the `.pth` may run more than once (a venv's lib64 is its lib), each run its own class."""

    hsstore_speculators = True

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        spec = None
        for finder in sys.meta_path:
            if not _ours(finder) and (spec := finder.find_spec(name, path, target)) is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_then_register(module: ModuleType) -> None:
            run(module)
            importlib.import_module(BACKEND)

        cast(Any, spec.loader).exec_module = exec_then_register  # this spec's loader (an instance of its own) only
        return spec


def _ours(finder: object) -> bool:
    return getattr(finder, "hsstore_speculators", False) is True


RUN_NAME = "hsstore_speculators_hook"  # this file's name when the .pth runs it


def activate() -> None:
    """Imports the backend now if `hs_connectors` is already imported, else right after it is."""
    if TARGET in sys.modules:
        importlib.import_module(BACKEND)
    elif not any(_ours(finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _After())


def install() -> Path:
    """The `.pth` file in this environment's site-packages, running this file by its path."""
    path = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    here = str(Path(__file__).resolve())
    path.write_text(f"import runpy; runpy.run_path({here!r}, run_name={RUN_NAME!r})\n")
    return path


def uninstall() -> Path | None:
    path = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    if not path.exists():
        return None
    path.unlink()
    return path


if __name__ == RUN_NAME:
    activate()
