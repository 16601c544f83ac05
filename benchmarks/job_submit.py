"""A warm job of 10^6 samples submitted to `hsstore serve` (CPU, the tiny model, a server that runs no jobs) as a JSONL
upload, on SQLite and on Postgres, by this tree and by an earlier one side by side (interleaved rounds, each server
fresh on a fresh store): the submission's wall time, the server's peak RSS and the client's (#63's goal: <= 60 s and
<= 500 MB).

    python benchmarks/job_submit.py --before 10199b0 --samples 1000000 --rounds 2 \
        --out benchmarks/results/job-submit-cpu.json

Each tree is checked out with `git worktree` (the servers import the tree as it is when they start); this one runs
as committed (HEAD), so commit first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.records import cpu_model  # noqa: E402
from benchmarks.scale import _SUBMIT, ADMIN, Server  # noqa: E402
from service.model.devmodel import build_devmodel  # noqa: E402

ENGINES = ("sqlite", "postgres")


def worktree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(where), rev], cwd=ROOT, check=True)
    return where


def catalog(engine: str) -> dict[str, str]:
    if engine == "sqlite":
        return {}
    import psycopg

    name = f"hsstore_submit_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return {"HSSTORE_CATALOG_URL": ADMIN.rsplit("/", 1)[0] + f"/{name}"}


def submit(tree: Path, engine: str, model: Path, upload: Path, work: Path, port: int) -> dict[str, float]:
    """One submission to a fresh server of `tree` on a fresh store: wall, server and client peak RSS."""
    env = {
        **os.environ,
        "HSSTORE_DATA_DIR": str(Path(tempfile.mkdtemp(dir=work))),
        "HSSTORE_MODEL_DIR": str(model),
        "HSSTORE_DEVICE": "cpu",
        "HSSTORE_PORT": str(port),
        "HSSTORE_RUN_JOBS": "false",
        "PYTHONPATH": str(tree),
        **catalog(engine),
    }
    with contextlib.chdir(tree), Server(env) as server:  # `python -m` puts its cwd first on the path: the tree's
        done = subprocess.run(
            [sys.executable, "-c", _SUBMIT, server.url, str(upload)], env=env, cwd=tree, capture_output=True, text=True
        )
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
        if "submitted" not in said:
            raise RuntimeError(done.stderr[-2000:])
        _, total, seconds = said["submitted"].split()
        return {
            "samples": int(total),
            "submit_wall_s": round(float(seconds), 1),
            "server_peak_rss_mb": round(server.peak_rss_mb(), 1),
            "client_peak_rss_mb": round(int(said["peak_rss_kb"]) / 1024, 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the earlier commit, measured beside HEAD")
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    work = Path(tempfile.mkdtemp(prefix="job-submit-"))
    trees = {"before": worktree(args.before, work / "before"), "after": worktree("HEAD", work / "after")}
    model = build_devmodel(work / "model")
    upload = work / "upload.jsonl"
    upload.write_text(
        "".join(json.dumps({"text": f"def job_{i}(x): return x + {i}"}) + "\n" for i in range(args.samples))
    )
    runs: dict[str, dict[str, list[dict[str, float]]]] = {e: {"before": [], "after": []} for e in args.engines}
    try:
        for round_ in range(args.rounds):
            for engine in args.engines:
                order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
                for name in order:
                    took = submit(trees[name], engine, model, upload, work, 18_950)
                    runs[engine][name].append(took)
                    print(json.dumps({"round": round_, "engine": engine, "tree": name, **took}), flush=True)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    summary = {}
    for engine, by_tree in runs.items():
        wall = {name: statistics.median(r["submit_wall_s"] for r in rows) for name, rows in by_tree.items()}
        rss = {name: max(r["server_peak_rss_mb"] for r in rows) for name, rows in by_tree.items()}
        summary[engine] = {
            "median_submit_wall_s": wall,
            "server_peak_rss_mb": rss,
            "after_over_before_wall": round(wall["after"] / wall["before"], 3),
        }
        print(
            f"{engine}: {wall['before']} s -> {wall['after']} s ({summary[engine]['after_over_before_wall']}x), "
            f"server peak {rss['before']} -> {rss['after']} MB"
        )
    record = {
        "command": " ".join(["python", *sys.argv]),
        "before": args.before,
        "after": head.strip(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "runs": runs,
        "summary": summary,
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
