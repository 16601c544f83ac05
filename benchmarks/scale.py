"""The store at the size of a real run (10^4 to 10^7 entries) on the embedded catalog (SQLite) and on Postgres: every
operation the size issue names, measured from outside against `hsstore serve`, side by side with the store at its
first size.

The cheap honest way to a store of 10^7 entries: 64 real entries extracted with the tiny model (their blobs are
there: reads of them read real bytes), then rows made from them through the catalog's own code (`add_many`: the
same encoding, indexes and tallies as every write), each with a sample, prompt hash and content hash of its own. The
point reads go to the real entries, which sit among the grown rows in every index. `verify --sample` draws from all
rows; a grown row has no blob, so it is found missing (and marked damaged: the store is a throwaway).

Per engine and size:
  point reads     GET /v1/features/{prompt} (whole entry, verified by nothing here: the service's work) and HEAD
                  (the resolution alone), p50/p99 over 200 requests each, one client
  a write         POST /v1/extract of 4 new samples: the writer's checks per entry (its versions, corrupt marks)
  health          `hsstore health` as a subprocess: wall
  listing         the first 50,000 entries and 50,000 from the middle, streamed by `FeatureClient.entries`: entries/s
  dataset create  every entry, on a freshly started server: wall, entries/s, the server's peak RSS
  verify          `hsstore verify DATA_DIR --sample 200`: wall, peak RSS
  catalog         its bytes on disk per entry, and per entry beyond the sample's own text
With --job-samples N at the largest size: a warm job of N samples submitted as JSONL (wall, the server's peak RSS,
the client's), and claims/s by 1, 8 and 32 claimer processes with it queued (Postgres), against a job of 1,000 in the
store at its first size.

    python benchmarks/scale.py --engines sqlite postgres --sizes 10000 100000 1000000 10000000 \\
        --job-samples 1000000 --out benchmarks/results/scale-cpu.json

Run it from a checkout that nothing edits while it runs (`git worktree add`): the servers it starts import the tree
as it is when each starts. The record is written after each measurement: a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from schemas.keys import EntryFilter
from schemas.manifest import Manifest
from schemas.prompt_hash import prompt_hash

ADMIN = os.environ.get("HSSTORE_TEST_POSTGRES", "postgresql://hsstore:hsstore@127.0.0.1:5432/postgres")
REAL = 64
READS = 200
CLAIMERS = (1, 8, 32)
CLAIM_SECONDS = 15.0
LISTED = 50_000
# An `hsstore` command that says its peak RSS as /proc has it (ru_maxrss keeps the forking parent's across exec)
_RSS = """import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module("hsstore.cli", run_name="__main__")
finally:
    peak = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
    print("peak_rss_kb", peak, file=sys.stderr)
"""


def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    """`hsstore serve` over the store, in its own process (its peak RSS is read from /proc)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{env['HSSTORE_PORT']}"

    def __enter__(self) -> Server:
        with contextlib.suppress(httpx.HTTPError):  # an earlier run's server left behind would answer for this one
            httpx.get(f"{self.url}/readyz", timeout=2)
            raise RuntimeError(f"something already listens at {self.url}: an earlier run's server?")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hsstore.cli", "serve"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited")
            time.sleep(0.3)
        raise RuntimeError("the server did not become ready")

    def peak_rss_mb(self) -> float:
        assert self.proc is not None
        return rss_peak_mb(self.proc.pid)

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def cli(env: dict[str, str], *args: str) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and output of an `hsstore` command in its own process."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _RSS, *args], env=env, capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - started
    peak = next((int(line.split()[1]) / 1024 for line in done.stderr.splitlines() if line.startswith("peak_rss_kb")), 0)
    return wall, peak, done.stdout + done.stderr


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def grown(templates: list[Manifest], start: int, stop: int) -> Iterator[Manifest]:
    """Rows `start`..`stop` made from the real entries: a sample, prompt hash and content hash of their own."""
    for i in range(start, stop):
        template = templates[i % len(templates)]
        sample = {"text": f"def scale_{i}(x):\n    return x * {i % 977} + {i}\n"}
        content = "sha256:" + hashlib.sha256(f"scale-content-{i}".encode()).hexdigest()
        yield template.model_copy(
            update={"sample": sample, "prompt_hash": prompt_hash(sample), "content_hash": content}
        )


def catalog_bytes(engine: str, settings: Any) -> tuple[int, float]:
    """The catalog's bytes on disk, and the mean bytes of a stored sample's text."""
    if engine == "sqlite":
        import sqlite3

        path = settings.catalog_path
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log's pages into the file: the file is the catalog
            sample = conn.execute("SELECT AVG(LENGTH(sample)) FROM samples").fetchone()[0]
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        return size, float(sample)
    import psycopg

    with psycopg.connect(settings.catalog_url) as conn:
        size = conn.execute(
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchone()[0]
        sample = conn.execute("SELECT AVG(LENGTH(sample)) FROM samples").fetchone()[0]
    return int(size), float(sample)


def measure(size: int, env: dict[str, str], data_dir: Path, real: list[Manifest], engine: str, settings: Any) -> dict:
    from client import FeatureClient

    rng = random.Random(size)
    row: dict[str, Any] = {"entries": size}
    with Server(env) as server, FeatureClient(server.url, timeout=600) as client:
        with httpx.Client(base_url=server.url, timeout=600) as http:
            for key in real[:16]:  # untimed: the server's first requests (its pools, caches, imports) are not a size's
                http.get(f"/v1/features/{key.prompt_hash}", params={"backend": key.backend})
            for name, method in (("get_features", "GET"), ("head_manifest", "HEAD")):
                times = []
                for _ in range(READS):
                    key = rng.choice(real)
                    params = {"backend": key.backend, "featureset": key.featureset_id}
                    started = time.perf_counter()
                    answered = http.request(method, f"/v1/features/{key.prompt_hash}", params=params)
                    times.append(time.perf_counter() - started)
                    assert answered.status_code == 200, answered.text[:300]
                row[name] = percentiles(times)
        fresh = [{"text": f"def written_{size}_{i}(x): return x - {i}\n"} for i in range(4)]
        started = time.perf_counter()
        client.extract(fresh)
        row["extract_4_new_s"] = round(time.perf_counter() - started, 3)
        for where, cursor in (("start", None), ("middle", str(size // 2))):
            started, listed = time.perf_counter(), 0
            while listed < LISTED:
                page = client.entries_page(limit=1000, cursor=cursor)
                listed += len(page.entries)
                cursor = page.next_cursor
                if cursor is None:
                    break
            wall = time.perf_counter() - started
            row[f"listing_{where}"] = {"entries": listed, "entries_per_s": round(listed / wall)}
        started, keyed = time.perf_counter(), 0
        for _ in client.keys(page_size=10_000):  # the key listing: whole keys, no manifests, to the end
            keyed += 1
        row["key_listing"] = {"entries": keyed, "entries_per_s": round(keyed / (time.perf_counter() - started))}
        row["server_rss_mb_after_reads"] = round(server.peak_rss_mb(), 1)
    wall, peak, said = cli(env, "health")
    row["health"] = {"wall_s": round(wall, 3), "peak_rss_mb": round(peak, 1), "said": said.splitlines()[1:2]}
    with Server(env) as server, FeatureClient(server.url, timeout=7200) as client:  # fresh: its peak is this call's
        started = time.perf_counter()
        info = client.create_dataset(f"everything-{size}-{uuid.uuid4().hex[:6]}")
        wall = time.perf_counter() - started
        row["dataset_create"] = {
            "entries": info.entries,
            "wall_s": round(wall, 2),
            "entries_per_s": round(info.entries / wall),
            "server_peak_rss_mb": round(server.peak_rss_mb(), 1),
            "index_mb": round(info.bytes / 1e6, 1),
        }
    wall, peak, said = cli(env, "verify", str(data_dir), "--sample", "200", "--seed", "1")
    row["verify_sample_200"] = {"wall_s": round(wall, 2), "peak_rss_mb": round(peak, 1)}
    size_bytes, sample = catalog_bytes(engine, settings)
    row["catalog"] = {
        "bytes": size_bytes,
        "bytes_per_entry": round(size_bytes / (size + REAL + 4)),
        "mean_sample_bytes": round(sample),
        "bytes_per_entry_beyond_sample": round(size_bytes / (size + REAL + 4) - sample),
    }
    print(json.dumps({engine: row}), flush=True)
    return row


_SUBMIT = """import sys, time
from client import FeatureClient
body = open(sys.argv[2], "rb").read()
started = time.perf_counter()
with FeatureClient(sys.argv[1], timeout=7200) as client:
    job = client.submit_job(jsonl=body)
print("submitted", job.id, job.total, time.perf_counter() - started)
print("peak_rss_kb", [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0])
"""
# A claimer: claims 8 items, finishes them, again, until the deadline or the queue is empty; prints how many it
# claimed and for how long it found any
_CLAIM = """import sys, time
from schemas.states import ItemState
from service.registry import build_catalog
from service.settings import Settings
_, _, jobs, _ = build_catalog(Settings.load(), read_only=False)
job, worker, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
claimed, started = 0, time.monotonic()
while time.monotonic() < started + seconds and (items := jobs.claim_items(job, worker, 8, lease_s=600)):
    for item in items:
        jobs.finish_item(item, ItemState.DONE, "sha256:" + "0" * 64, worker=worker)
    claimed += len(items)
print(claimed, time.monotonic() - started)
"""


def submit(env: dict[str, str], work: Path, samples: int) -> tuple[str, dict[str, Any]]:
    """A warm job of `samples` JSONL samples, submitted by a client process to a server that runs no jobs (the
    queue stays as it was submitted, for the claimers); the job's id and what submitting it took."""
    upload = work / f"job-{samples}.jsonl"
    upload.write_text("".join(json.dumps({"text": f"def job_{i}(x): return x + {i}"}) + "\n" for i in range(samples)))
    with Server({**env, "HSSTORE_RUN_JOBS": "false"}) as server:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _SUBMIT, server.url, str(upload)], env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - started
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
        if "submitted" not in said:
            raise RuntimeError(done.stderr[-2000:])
        took = {
            "samples": samples,
            "submit_wall_s": round(wall, 1),
            "server_peak_rss_mb": round(server.peak_rss_mb(), 1),
            "client_peak_rss_mb": round(int(said["peak_rss_kb"]) / 1024, 1),
        }
    return said["submitted"].split()[0], took


def claims_per_s(env: dict[str, str], job_id: str, count: int, seconds: float) -> float:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIM, job_id, f"claimer-{count}-{n}", str(seconds)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    said = [p.communicate()[0].split() for p in processes]
    claimed, busy = sum(int(s[0]) for s in said), max(float(s[1]) for s in said)
    return round(claimed / busy, 1)


def jobs(env: dict[str, str], work: Path, samples: int, baseline: bool) -> dict:
    """Claims/s by 1, 8 and 32 claimer processes (`CLAIM_SECONDS` each, or until the queue is empty): at the first
    size a job of 1,000 samples of its own for each, at the last one job of `samples` (its submission measured)."""
    row: dict[str, Any] = {"queued": samples, "claims_per_s": {}}
    if not baseline:
        job_id, row["submit"] = submit(env, work, samples)
    for count in CLAIMERS:
        if baseline:
            job_id, _ = submit(env, work, samples)
        row["claims_per_s"][str(count)] = claims_per_s(env, job_id, count, CLAIM_SECONDS)
    print(json.dumps({"jobs": row}), flush=True)
    return row


def run_engine(
    engine: str, sizes: list[int], work: Path, job_samples: int, save: Callable[[dict], None] = lambda _: None
) -> dict:
    """Grow the engine's store size by size, measuring each; `save(result so far)` after each measurement (a run cut
    short keeps what it measured)."""
    from service.main import build_services
    from service.model.devmodel import build_devmodel
    from service.settings import Settings

    model = build_devmodel(work / "model")
    data_dir = work / f"store-{engine}"
    catalog_url = None
    if engine == "postgres":
        import psycopg

        name = f"hsstore_scale_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        catalog_url = ADMIN.rsplit("/", 1)[0] + f"/{name}"
    settings = Settings(data_dir=data_dir, model_dir=model, device="cpu", catalog_url=catalog_url)
    env = {
        **os.environ,
        "HSSTORE_DATA_DIR": str(data_dir),
        "HSSTORE_MODEL_DIR": str(model),
        "HSSTORE_DEVICE": "cpu",
        "HSSTORE_PORT": str(18_900 + (engine == "postgres")),
        "HSSTORE_URL": f"http://127.0.0.1:{18_900 + (engine == 'postgres')}",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        **({"HSSTORE_CATALOG_URL": catalog_url} if catalog_url else {}),
    }
    (work / f"state-{engine}.json").write_text(
        json.dumps({"data_dir": str(data_dir), "model_dir": str(model), "catalog_url": catalog_url, "env": env})
    )
    services = build_services(settings)
    from schemas.api import ExtractRequest

    rows: list[dict] = []
    growth: list[dict] = []
    queues: dict[str, dict] = {}
    have = REAL
    result = {"engine": engine, "rows": rows, "growth": growth, "jobs": queues}
    with services.running(jobs=False):
        samples = [{"text": f"def real_{i}(x):\n    return x ** {i % 5} + {i}\n" * (1 + i % 4)} for i in range(REAL)]
        real = [r.manifest for r in services.writer.extract(ExtractRequest(samples=samples), run_now=True).results]
        for size in sizes:
            started = time.perf_counter()
            services.versions.add_many(grown(real, have, size))
            growth.append({"to": size, "wall_s": round(time.perf_counter() - started, 1)})
            have = size
            rows.append(measure(size, env, data_dir, real, engine, settings))
            save(result)
            if job_samples and size in (sizes[0], sizes[-1]):  # a small queue in the small store; the big ones
                baseline = size == sizes[0]
                queues[str(size)] = jobs(env, work, 1_000 if baseline else job_samples, baseline)
                save(result)
    return result


def remeasure(engine: str, size: int, work: Path) -> dict:
    """The store an earlier run grew in `work`, measured again as it is (its catalog's URL from the state it left)."""
    from service.main import build_services
    from service.settings import Settings

    state = json.loads((work / f"state-{engine}.json").read_text())
    data_dir = Path(state["data_dir"])
    settings = Settings(
        data_dir=data_dir, model_dir=Path(state["model_dir"]), device="cpu", catalog_url=state["catalog_url"]
    )
    services = build_services(settings)
    with services.running(jobs=False):
        real = services.versions.find(EntryFilter(), limit=REAL)  # the real entries came first
        row = measure(size, state["env"], data_dir, real, engine, settings)
    return {"engine": engine, "rows": [row], "remeasured": True}


def rejob(engine: str, size: int, work: Path, job_samples: int) -> dict:
    """A warm job of `job_samples` submitted again to the store an earlier run grew in `work`, and claimed."""
    state = json.loads((work / f"state-{engine}.json").read_text())
    return {"engine": engine, "entries": size, "jobs": jobs(state["env"], work, job_samples, baseline=False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000, 10_000_000])
    parser.add_argument("--job-samples", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="measure the stores an earlier run grew in --work-dir at its last size again (no growth, no jobs)",
    )
    parser.add_argument(
        "--jobs-only",
        action="store_true",
        help="submit a job of --job-samples to the stores an earlier run grew in --work-dir, and claim it (no growth)",
    )
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="hsstore-scale-"))
    record: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None,
        "tree_clean": not subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout,
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in line
            ),
            None,
        ),
        "cores": os.cpu_count(),
        "engines": [],
    }
    engines: list[dict] = record["engines"]

    def save(partial: dict) -> None:
        if args.out:
            args.out.write_text(json.dumps({**record, "engines": [*engines, partial]}, indent=1) + "\n")

    for engine in args.engines:
        if args.jobs_only:
            engines.append(rejob(engine, args.sizes[-1], work, args.job_samples))
        elif args.measure_only:
            engines.append(remeasure(engine, args.sizes[-1], work))
        else:
            engines.append(run_engine(engine, args.sizes, work, args.job_samples, save))
    print(json.dumps(record, indent=1))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
