"""What a /metrics scrape costs as the store grows: two stores side by side in one run, scraped in turn (interleaved)
through the service's own app — a small one (--small entries, a job of as many items) and a large one (--large
entries, an active job of as many items, with live and lapsed leases) — on the embedded catalog (SQLite). Every
gauge is read from counters and rows kept current (tallies, the job row's counts, the index of leased items), so the
ratio should stay near 1 whatever the size; a scan of entries or items would show in it.

Rows are made through the catalog's own code (`add_many`, `create_job`): the same encoding, indexes and tallies as
every write, with synthetic manifests (no model is needed: a scrape reads no blob).

    python benchmarks/scrape.py --small 1000 --large 100000 --scrapes 200 --out benchmarks/results/scrape-cpu.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from schemas.manifest import Manifest
from schemas.states import JobState
from service.catalog.jobs.records import NewItem
from service.catalog.jobs_testing import job_record
from service.catalog.testing import manifest
from service.main import create_app
from service.settings import Settings


def versions(count: int) -> Iterator[Manifest]:
    """`count` versions over 3 backends, each with a prompt and content hash of its own."""
    template = manifest()
    for i in range(count):
        prompt, content = (hashlib.sha256(f"{kind}-{i}".encode()).hexdigest() for kind in ("prompt", "content"))
        backend = ("fla", "fla-noconv", "torch")[i % 3]
        yield template.model_copy(
            update={"prompt_hash": prompt, "content_hash": f"sha256:{content}", "backend": backend}
        )


def store(root: Path, entries: int) -> tuple[TestClient, dict[str, Any]]:
    """An app over a store of `entries` versions and one running job of as many items, 64 of them leased by two
    workers (one lease run out)."""
    app = create_app(Settings(data_dir=root))
    services = app.state.services
    started = time.perf_counter()
    services.versions.add_many(versions(entries))
    items = (NewItem(i, "torch", {"text": str(i)}, f"{i:064d}", None) for i in range(entries))
    services.jobs.create_job(job_record("job", 0, "2026-12-05T00:00:00Z"), items)
    services.jobs.set_job_state("job", JobState.RUNNING, started_at="2026-12-05T00:00:01Z")
    services.jobs.claim_items("job", "gpu-1:cuda:0", 32, lease_s=600)
    services.jobs.claim_items("job", "gpu-2:cuda:0", 32, lease_s=0.01)
    time.sleep(0.05)  # gpu-2's leases run out: a worker lost
    built = {"entries": services.versions.count(), "items": entries, "build_s": round(time.perf_counter() - started, 1)}
    return TestClient(app), built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        sides = {name: store(Path(work) / name, size) for name, size in (("small", args.small), ("large", args.large))}
        for client, _ in sides.values():
            client.get("/metrics")  # first scrape: imports and caches warmed, untimed
        wall: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.scrapes):
            for name, (client, _) in sides.items():  # in turn: the box's noise falls on both alike
                started, started_cpu = time.perf_counter(), time.process_time()
                answer = client.get("/metrics")
                wall[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)
                assert answer.status_code == 200 and "hsstore_lapsed_lease_items" in answer.text
        record: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "commit": _commit()}
        for name, (client, built) in sides.items():
            text = client.get("/metrics").text
            record[name] = {
                **built,
                "series": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
                "scrape_bytes": len(text),
                "wall_ms_p50": round(statistics.median(wall[name]) * 1000, 2),
                "wall_ms_p99": round(sorted(wall[name])[int(0.99 * (len(wall[name]) - 1))] * 1000, 2),
                "cpu_ms_mean": round(statistics.fmean(cpu[name]) * 1000, 2),
            }
        record["large_over_small"] = {
            "wall_p50": round(record["large"]["wall_ms_p50"] / record["small"]["wall_ms_p50"], 3),
            "cpu_mean": round(record["large"]["cpu_ms_mean"] / record["small"]["cpu_ms_mean"], 3),
        }
    print(json.dumps(record, indent=2))
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")


def _commit() -> str:
    here = Path(__file__).parent
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=here)
    return found.stdout.strip()


if __name__ == "__main__":
    main()
