"""Child processes that run side by side in one test: each waited for in turn, and none outlives the wait."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping


def outputs_of(runs: Mapping[str, subprocess.Popen[str]], timeout: float) -> dict[str, tuple[str, str]]:
    """Each run's (stdout, stderr) once every one has ended (`timeout` seconds for each wait); if a wait ends early,
    by its timeout or otherwise, every run is killed (a no-op for those that have ended)."""
    try:
        return {name: run.communicate(timeout=timeout) for name, run in runs.items()}
    finally:
        for run in runs.values():
            run.kill()
