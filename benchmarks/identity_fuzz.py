"""The generative tests of #66, run long: the suite's own Hypothesis tests (the sample's identity on every local and
service path, every response body through the client's decoders) with their examples multiplied, so that together
they draw at least `--examples` (10^5) examples. Prints and records how many each ran, what share the contract and
the service keyed or refused, and whether anything failed.

    python benchmarks/identity_fuzz.py --examples 100000 --out benchmarks/results/identity-fuzz-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = ["tests/hsstore/test_identity_fuzz.py", "tests/client/test_decoder_fuzz.py"]
BASE_EXAMPLES = 600 + 60 + 300 + 200 + 100  # what the suite's tests draw at HSSTORE_FUZZ_SCALE=1


def _statistics(output: str) -> dict[str, dict[str, float]]:
    """Per test: the examples that passed and failed, and the share of each outcome event."""
    found: dict[str, dict[str, float]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("tests/") and "::" in line and line.rstrip().endswith(":"):
            current = found.setdefault(line.strip().rstrip(":").split("::")[-1], {"passing": 0, "failing": 0})
        elif current is not None and (counted := re.search(r"(\d+) passing, (\d+) failing", line)):
            current["passing"] += int(counted[1])
            current["failing"] += int(counted[2])
        elif current is not None and (share := re.search(r"\* ([\d.]+)%, ((?:contract|service): \w+)", line)):
            current[share[2]] = float(share[1]) / 100
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    scale = max(1.0, (args.examples + 10) / BASE_EXAMPLES)  # a little over: each of the five tests floors its count
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    env = {**os.environ, "HSSTORE_FUZZ_SCALE": f"{scale:.3f}"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    command += ["--hypothesis-show-statistics", "--hypothesis-seed=0", *TESTS]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    tests = _statistics(done.stdout)
    examples = int(sum(t["passing"] + t["failing"] for t in tests.values()))
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    record = {
        "command": " ".join(["python", *sys.argv]),
        "commit": commit.stdout.strip(),  # as the run began
        "scale": round(scale, 3),
        "examples": examples,
        "failing": int(sum(t["failing"] for t in tests.values())),
        "pytest_exit": done.returncode,
        "pytest_summary": summary,
        "wall_s": round(wall, 1),
        "tests": tests,
    }
    print(json.dumps(record, indent=2))
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    sys.exit(0 if done.returncode == 0 and examples >= args.examples else 1)


if __name__ == "__main__":
    main()
