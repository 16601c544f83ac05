"""One worker per GPU on one queue, on the 2-GPU machine, 27B shape, 5 DFlash layers; and a model spread over both.

  single   one worker process (cuda:0) drains a warm job of `--tokens` tokens
  workers  one worker process per GPU drain another job of the same lengths (other token ids), the same run
  split    the same weights placed on one GPU, then spread over two (layers 0-31 / 32-63): are the bits the same,
           and what does the spread model's forward cost

Each worker is the `hsstore worker` loop (service.main.build_services + JobRunner, claims under leases) with the
synthetic 27B-shaped model built in its process; it warms up (fla's JIT, autotuning for the benchmark's lengths,
the fusion probes) before it claims anything. The queue and store are one SQLite catalog and one local store on the
machine's disk, shared by the worker processes. Prints the figures and writes one JSON record.

    python benchmarks/workers.py --gpus 2 --tokens 100000 --out benchmarks/results/extract-h200x2.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GB = 1e9
LENGTHS = (1024, 2048, 4096)  # few distinct lengths: fla autotunes per length, once per process


def sequences(tokens: int, seed: int, vocab: int = 248320) -> list[list[int]]:
    rng = random.Random(seed)
    out: list[list[int]] = []
    while sum(map(len, out)) < tokens:
        out.append([rng.randrange(vocab - 1024) for _ in range(rng.choice(LENGTHS))])
    return out


def submit(data_dir: Path, samples: list[list[int]], featureset: dict, backend: str) -> str:
    """The job as the API's queue would create it (samples of token ids need no tokenizer)."""
    from schemas.prompt_hash import prompt_hash
    from schemas.states import JobState
    from schemas.timestamps import utc_now
    from service.catalog import SqliteDatabase, SqliteJobStore
    from service.catalog.jobs.records import JobRecord, NewItem

    db = SqliteDatabase(data_dir / "catalog.sqlite")
    jobs = SqliteJobStore(db)
    job_id = uuid.uuid4().hex
    record = JobRecord(job_id, JobState.QUEUED, 0, False, [backend], featureset, None, utc_now(), None, None, 0, 0.0)
    items = [
        NewItem(i, backend, {"token_ids": ids}, prompt_hash({"token_ids": ids}), None) for i, ids in enumerate(samples)
    ]
    jobs.create_job(record, items)
    db.close()
    return job_id


def drain(data_dir: Path, job_id: str, timeout: float = 500) -> float:
    """Seconds until every item of the job is done."""
    from service.catalog import SqliteDatabase, SqliteJobStore

    db = SqliteDatabase(data_dir / "catalog.sqlite")
    jobs = SqliteJobStore(db)
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        counts = jobs.job_counts(job_id)
        if counts.get("failed"):
            raise SystemExit(f"items failed: {jobs.job_errors(job_id)}")
        if not counts.get("pending"):
            db.close()
            return time.perf_counter() - start
        time.sleep(0.05)
    raise SystemExit(f"job {job_id} did not finish: {jobs.job_counts(job_id)}")


def worker(device: str, data_dir: Path, ready: Path, layers: int, backend: str) -> None:
    """A worker process: the synthetic model on `device`, warmed up, then the queue until SIGTERM."""
    import threading

    from schemas.api import ExtractRequest
    from schemas.featureset import FeatureSet
    from service.main import build_services
    from service.model.synthetic import build_synthetic
    from service.settings import Settings

    loaded = build_synthetic(device, num_layers=layers)
    settings = Settings(
        data_dir=data_dir,
        device=device,
        writer_threads=4,
        job_batch_size=16,
        worker_name=f"bench:{device}",
        lease_s=120,
    )
    warm_dir = Path(tempfile.mkdtemp(prefix="hsstore-warm-"))
    warm = build_services(settings.model_copy(update={"data_dir": warm_dir, "run_jobs": False}), loaded)
    featureset = FeatureSet.default_for(loaded.num_layers)
    for length in LENGTHS:  # fla's JIT and autotuning, the fusion probes: before the clock starts
        ids = [random.Random(length).randrange(1000, 200000) for _ in range(length)]
        warm.writer.extract(ExtractRequest(samples=[{"token_ids": ids}], featureset=featureset, backend=backend))
    warm.close()
    services = build_services(settings, loaded)
    assert services.runner is not None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    services.runner.start()
    ready.write_text(device)
    stop.wait()
    services.runner.stop()
    services.close()


def start_worker(
    device: str, data_dir: Path, log_dir: Path, layers: int, backend: str
) -> tuple[subprocess.Popen, Path]:
    label = device.replace(":", "")
    ready = log_dir / f"ready-{label}-{len(list(log_dir.glob('ready-*')))}"
    log = (log_dir / f"worker-{label}-{len(list(log_dir.glob('worker-*')))}.log").open("w")
    command = [sys.executable, __file__, "--worker", device, "--data-dir", str(data_dir), "--ready", str(ready)]
    process = subprocess.Popen(
        [*command, "--layers", str(layers), "--backend", backend],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return process, ready


def wait_ready(ready: Path, process: subprocess.Popen, timeout: float = 400) -> None:
    start = time.monotonic()
    while not ready.exists():
        if process.poll() is not None or time.monotonic() - start > timeout:
            logs = sorted(ready.parent.glob("worker-*.log"))
            tail = logs[-1].read_text()[-3000:] if logs else ""
            raise SystemExit(f"worker did not come up ({ready.name}):\n{tail}")
        time.sleep(0.2)


def split_check(tokens: int) -> dict:
    """The same weights on one GPU, then spread over two: bits, and the forward's speed each way."""
    import dataclasses

    import torch

    from compute.tensors import to_torch
    from schemas.backend import Backend
    from schemas.content_hash import content_hash
    from schemas.featureset import FeatureSet
    from schemas.samples import parse_sample
    from service.extraction.extractor import Extractor
    from service.model.placement import spread_layers
    from service.model.synthetic import build_synthetic

    loaded = build_synthetic("cuda:0")
    featureset = FeatureSet.default_for(loaded.num_layers)
    seqs = sequences(tokens, seed=7)

    def run(extractor: Extractor) -> tuple[list[str], float, list]:
        items = [(loaded.spec.encode(parse_sample({"token_ids": ids}), 1 << 20), "split") for ids in seqs]
        for _, pending in extractor.extract_many(items[:2], featureset, Backend.FLA, 0):
            pending.wait()  # warm: JIT, autotune
        torch.cuda.synchronize()
        start = time.perf_counter()
        results = [pending.wait() for _, pending in extractor.extract_many(items, featureset, Backend.FLA, 0)]
        elapsed = time.perf_counter() - start
        return [content_hash(r.tensors) for r in results], sum(map(len, seqs)) / elapsed, results

    single_hashes, single_tok_s, single_results = run(Extractor(loaded))
    placement = spread_layers(loaded.model, [torch.device("cuda:0"), torch.device("cuda:1")])
    spread = Extractor(dataclasses.replace(loaded, device_map=placement))
    split_hashes, split_tok_s, split_results = run(spread)
    differing = [i for i, (a, b) in enumerate(zip(single_hashes, split_hashes, strict=True)) if a != b]
    max_diff = 0.0
    for i in differing:
        a = next(t for t in single_results[i].tensors if t.name == "hidden_states")
        b = next(t for t in split_results[i].tensors if t.name == "hidden_states")
        max_diff = max(max_diff, float((to_torch(a).float() - to_torch(b).float()).abs().max()))
    return {
        "placement": placement,
        "fingerprint_device_map": spread.plan(Backend.FLA).fingerprint.device_map,
        "sequences": len(seqs),
        "tokens": sum(map(len, seqs)),
        "bit_equal_to_single_gpu": not differing,
        "sequences_differing": len(differing),
        "max_abs_diff": max_diff,
        "single_gpu_forward_tok_s": single_tok_s,
        "split_forward_tok_s": split_tok_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--devices", help="one worker per device (default cuda:0 … cuda:{gpus-1}); cpu,cpu to try it")
    parser.add_argument("--layers", type=int, default=64, help="decoder layers of the 27B-shaped model")
    parser.add_argument("--backend", default="fla")
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--split-tokens", type=int, default=16_384)
    parser.add_argument("--work-dir", type=Path, help="where the store and catalog go (e.g. /dev/shm: no disk limit)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.data_dir, args.ready, args.layers, args.backend)
        return
    devices = args.devices.split(",") if args.devices else [f"cuda:{i}" for i in range(args.gpus)]

    import torch

    from benchmarks.records import record_header
    from schemas.featureset import FeatureSet

    record: dict = {
        **record_header(),
        "gpus": torch.cuda.device_count(),
        "workers": len(devices),
        "worker_devices": devices,
        "backend": args.backend,
        "layers": args.layers,
    }
    featureset = FeatureSet.default_for(args.layers).canonical()
    record["featureset"] = featureset
    work = Path(tempfile.mkdtemp(prefix="hsstore-workers-", dir=args.work_dir))
    record["work_dir"] = str(work)
    data_dir = work / "store"
    data_dir.mkdir()
    processes = []
    try:
        first, ready = start_worker(devices[0], data_dir, work, args.layers, args.backend)
        processes.append(first)
        wait_ready(ready, first)
        single = sequences(args.tokens, seed=1)
        total = sum(map(len, single))
        record["tokens"], record["sequences"] = total, len(single)
        record["single_gpu_tok_s"] = total / drain(data_dir, submit(data_dir, single, featureset, args.backend))
        print(f"one worker: {record['single_gpu_tok_s']:.0f} tok/s", flush=True)
        for device in devices[1:]:
            process, ready = start_worker(device, data_dir, work, args.layers, args.backend)
            processes.append(process)
            wait_ready(ready, process)
        many = sequences(args.tokens, seed=2)
        record["e2e_tok_s"] = sum(map(len, many)) / drain(data_dir, submit(data_dir, many, featureset, args.backend))
        record["speedup"] = record["e2e_tok_s"] / record["single_gpu_tok_s"]
        print(f"{len(devices)} workers: {record['e2e_tok_s']:.0f} tok/s ({record['speedup']:.2f}x)", flush=True)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
    record["worker_logs_tail"] = {log.name: log.read_text()[-600:] for log in sorted(work.glob("worker-*.log"))}
    if torch.cuda.device_count() >= 2:
        record["split"] = split_check(args.split_tokens)
        print(f"split: {record['split']}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))
    print(json.dumps(record))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
