"""A short soak (benchmarks/soak.py, its load without the faults) against a real `hsstore serve`: the server's memory
stays level, and under the budget it states, while it extracts a downtime window's workload flat out (16 to 8,192
tokens a sequence) beside verified reads. Before service/host/allocator.py bounded glibc's heap it grew by a fifth in
the same minute (docs/measurements.md, "A day of load"); the 30-minute record is the soak's."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DURATION, WARMUP, SPAN = 90, 20, 20  # seconds: the load, RSS after warm-up, the spans whose medians are compared


def _level_growth(samples: list[dict[str, float]]) -> float:
    """The median RSS of the last SPAN seconds over that of the first SPAN after warm-up, less 1: each long sequence
    lifts RSS by several percent while it is written, so a level is a median, not one sample."""
    first = [s["rss_mib"] for s in samples if WARMUP <= s["t"] < WARMUP + SPAN]
    last = [s["rss_mib"] for s in samples if s["t"] >= DURATION - SPAN]
    return statistics.median(last) / statistics.median(first) - 1


def test_a_short_soak_keeps_the_servers_memory_level_with_no_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    subprocess.run(
        [
            sys.executable,
            "benchmarks/soak.py",
            *("--duration", str(DURATION), "--warmup", str(WARMUP), "--window", "20", "--sample-every", "2"),
            *("--reader-processes", "2", "--reader-threads", "6", "--workload", "window", "--no-faults"),
            *("--model-dir", str(tiny_model_dir), "--work-dir", str(tmp_path / "w"), "--out", str(out)),
        ],
        cwd=REPO,
        check=True,
        timeout=600,
        capture_output=True,
    )
    load = json.loads(out.read_text())["load"]
    memory = load["memory"]
    assert load["errors"] == 0, load["error_examples"]
    assert load["acknowledged"] > 0 and load["operations"] > 1000
    # the leak: +22% in the 70 s after warm-up on the chat load (12 readers, one writer); level, it stays within the
    # issue's bound of +10% (+1.9% and +3.8% in two runs here on the window's)
    growth = _level_growth(load["samples"])
    assert growth <= 0.10, (growth, memory)
    assert load["host_memory"]["within_budget"], load["host_memory"]  # the budget the server states, held throughout
    # connections come and go with the readers (about 20 to 60 fds); one left behind per request would pass these
    assert memory["fds"][1] <= 128 and memory["threads"][1] <= 64, memory
