"""Does a training node get its features at its speed? The same entries ([T, 5, H] bf16, a 27B target's 5 DFlash
layers), delivered as collated batches (`pad_collate`) into a consumer loop, by each source in turn:

  anchor   the entries exported with `hsstore export --format specforge`, read back with torch.load(mmap=True) +
           pad_collate into fresh memory (`recycle=False`): what a SpecForge user has (no decode, no verification;
           SpecForge's own collator allocates each batch afresh too, twice: each sample padded, then concatenated)
  anchor-recycled   the same, collated into recycled memory as every other variant is (`client.host_memory`):
           what the anchor would gain from our collate alone
  cache    the client's disk cache, every chunk verified against its write-time digest as `pad_collate` copies it
           into the batch (`fetch_sample`)
  service  `hsstore serve --processes P` over loopback (a model-less read replica), verified, each chunk decoded
           straight into the batch (`fetch_sample`)
  service-per-entry   the same, each entry decoded into an array of its own and then collated (`client.fetch`):
           the path before
  service-uncompressed   the service over a store of the same entries written with `codec = "uncompressed"`
  cache-processes, service-processes, service-uncompressed-processes   the same sources through `ProcessFeed`:
           the n cores split among worker processes of two cores each, three batches each at once, every batch
           collated (verified) into shared memory this process maps
  direct   chunks read straight from an S3-API server (moto here, which bounds it), verified; beside it moto's own
           rate for the very same ranged GETs, raw and unchecked (the better of the client's own sockets and boto3)
  gpu-*    batches landed in device memory by `DeviceFeed` behind a synthetic 100 ms step (CUDA only), from
             gpu-staged   the cache (checked, then copied), collated into pageable memory, which DeviceFeed copies
                          into its pinned slots: the path before `fetch_sample` and pinned collation
             gpu-cache    the cache (`fetch_sample`), collated straight into pinned memory (`pad_collate(...,
                          pin_memory=True)`)
             gpu-service  the service, collated straight into pinned memory
             gpu-cache-processes, gpu-service-processes   `ProcessFeed(..., pin_memory=True)`: its shared
                          memory registered with CUDA, copied from as it lies
           pinned memory is allocated before the clock starts (a trainer pays for it once, in its first batches)

Every variant runs in a process of its own, restricted to `n` cores (its CPU affinity; the decode pool sizes itself
from it), with `n` threads each assembling whole batches, `n` batches ahead (a `ProcessFeed`: its own depth); the
service's processes run on other cores where the machine has them. Each delivers one stream of batches: a warm-up (a
pass over them, longer where the pipeline is deeper), the timed passes (at least three pipeline depths), then the
pipeline's depth more; the clock runs from the arrival of the warm-up's last batch to that of the timed passes'
last: the sustained rate of a training run of thousands of batches (the pipeline full at both ends, its memory
recycled), with neither the fill nor the drain of a short run. Rounds interleave the variants and core counts; the
best round counts, and every round's GB/s is kept (`rounds_gbs`: how much a figure moves). Per variant and core count:
GB/s and tokens/s delivered, client CPU-s/GB (with a `ProcessFeed`'s workers), the serving processes' CPU-s/GB
and the busiest one's share of it (how evenly a replica's processes split the connections), the share of the loop
spent waiting, and the ratio to the anchor at the same core count.
The last line is the JSON record.

    python benchmarks/feed.py --quick                                   # a few minutes on 2 cores
    python benchmarks/feed.py --out benchmarks/results/feed-cpu.json
    python benchmarks/feed.py --cores 1,2,4,8,12 --out benchmarks/results/feed-h200host.json   # on the GPU host

On the GPU machine's host, moto travels in the wheels `scripts/feed-host-wheels.sh` makes (`.whl-feed`, carried):
    source .whl-feed/install.sh && export PYTHONPATH=$PWD:$PYTHONPATH && python benchmarks/feed.py ...
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GB = 1e9
ROOT = Path(__file__).resolve().parents[1]
CPU_VARIANTS = (
    "anchor",
    "anchor-recycled",
    "cache",
    "cache-processes",
    "service",
    "service-processes",
    "service-per-entry",
    "service-uncompressed",
    "service-uncompressed-processes",
    "direct",
)
GPU_VARIANTS = {
    "gpu-staged": ("cache", False),
    "gpu-cache": ("cache", True),
    "gpu-service": ("service", True),
    "gpu-cache-processes": ("cache-processes", True),
    "gpu-service-processes": ("service-processes", True),
}
# `ProcessFeed`: the cores split among worker processes of two cores each, three batches at a time in each (a
# thread waits on its socket for much of a batch)
PROCESSES = {
    "cache-processes": "cache",
    "service-processes": "service",
    "service-uncompressed-processes": "service-uncompressed",
}
PER_ENTRY = ("service-per-entry", "gpu-staged")  # decoded and checked into arrays of their own, then collated
S3_KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


# -- one measurement, in a process of its own ------------------------------------------------------------------
def measure(spec: dict) -> dict:
    """Deliver every batch of `spec` once from `spec["variant"]` on `spec["cores"]` cores; the figures."""
    import torch

    from benchmarks.serve import process_cpu_s
    from client import FeatureClient, pad_collate
    from schemas.keys import FeatureKey

    cores = sorted(os.sched_getaffinity(0))[: spec["cores"]]
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(1)  # the n threads assembling batches are the parallelism; n intra-op threads each would spin
    n, variant = len(cores), spec["variant"]
    keys = [FeatureKey(**k) for k in spec["keys"]]
    batch = spec["batch"]
    batches = [keys[i : i + batch] for i in range(0, len(keys), batch)]
    source_variant, pin = GPU_VARIANTS.get(variant, (variant, False))
    recycle = variant != "anchor"

    feed = None  # a ProcessFeed, for the variants that read through one
    url = spec["urls"][_served_from(source_variant) or "service"]  # the cache's misses would go to the service
    if source_variant.startswith("anchor"):

        def sample(key: FeatureKey) -> dict:
            record = torch.load(spec["files"][key.content_hash], mmap=True, weights_only=True)
            ids = record["input_ids"]
            hidden = record["hidden_states"].view(ids.shape[0], spec["layers"], -1)
            return {"hidden_states": hidden, "input_ids": ids, "content_hash": key.content_hash}

    elif source_variant in PROCESSES:
        from client import ProcessFeed

        feed = ProcessFeed(
            url,
            processes=max(1, n // 2),
            threads=3,
            cache_dir=spec["cache_dir"] if PROCESSES[source_variant] == "cache" else None,
            pin_memory=pin,
        )
    else:
        from client.training.torch_data import fetch_sample, to_sample

        client = FeatureClient(
            url,
            max_connections=max(n, 4),
            cache=spec["cache_dir"] if source_variant == "cache" else None,
            direct_reads=source_variant == "direct",
        )

        def sample(key: FeatureKey) -> dict:
            if spec["variant"] in PER_ENTRY:
                return to_sample(client.fetch(key))
            return fetch_sample(client, key)  # hidden states checked as pad_collate copies them in

    def assemble(keys_of_batch: list[FeatureKey]) -> dict:
        return pad_collate([sample(k) for k in keys_of_batch], pin_memory=pin, recycle=recycle)

    # one stream: a warm-up (a pass, and at least the pipeline's depth and two: what fills the memory it recycles),
    # then the timed pass, then the pipeline's depth more so that it stays full. The clock runs from the arrival of
    # the warm-up's last batch to that of the timed pass's last, so the work in flight when it starts is the work in
    # flight when it stops: the sustained rate, no fill and no drain of a short run. The timed passes are at least
    # three depths long: batches arrive in order, so a window shorter than the depth can be one that was all done
    # while the consumer waited for the batch before it (a 12-core feed 24 batches deep once "delivered" 1.6 TB/s)
    depth = feed.ahead if feed is not None else n
    warm = max(len(batches), depth + 2)
    timed = len(batches) * math.ceil(3 * depth / len(batches))
    stream = [batches[i % len(batches)] for i in range(warm + timed + depth)]
    first, last = warm - 1, warm + timed - 1

    def delivered() -> Iterator[dict]:
        if feed is not None:
            yield from feed.batches(stream)
            return
        pool = ThreadPoolExecutor(n)
        try:
            ahead: deque[Future[dict]] = deque()
            for keys_of_batch in stream:
                ahead.append(pool.submit(assemble, keys_of_batch))
                if len(ahead) >= n:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:
            pool.shutdown(cancel_futures=True)

    # the processes serving this variant's bytes (a service's, and moto's for direct reads), each counted alone: how
    # evenly a replica's processes share the work is what its busiest one's share says
    servers = [pid for top in spec["servers"].get(_served_from(source_variant), []) for pid in _tree(top)]

    def cpu_seconds() -> tuple[float, list[float]]:
        """This process's CPU time with its feed's worker processes', and each server process's."""
        mine = sum(process_cpu_s(pid) for pid in (feed.pids if feed is not None else []))
        return time.process_time() + mine, [process_cpu_s(pid) for pid in servers]

    def consume(source: Iterator[dict], step: Callable[[], None]) -> dict:
        payload, tokens, waited, cpu, start, served = 0, 0, 0.0, 0.0, 0.0, []
        for index, keys_of_batch in enumerate(stream[: last + 1]):
            asked = time.perf_counter()
            got = next(source)
            arrived = time.perf_counter()
            # the loop holds what it holds in the timed pass in the warm-up too (this batch and the one before),
            # so the warm-up has filled all the memory the timed pass recycles
            hidden = got["hidden_states"]
            if index > first:
                waited += arrived - asked
                if got["content_hash"] != [k.content_hash for k in keys_of_batch]:
                    raise SystemExit(f"{variant}: a batch of other entries than asked for")
                payload += sum(int(length) * (hidden[0, 0].numel() * 2 + 8) for length in got["lengths"])
                tokens += int(got["lengths"].sum())
            if index == first:
                (cpu, served), start = cpu_seconds(), arrived
            if index == last:
                (cpu_now, served_now), elapsed = cpu_seconds(), arrived - start
                cpu, served = cpu_now - cpu, [b - a for a, b in zip(served, served_now, strict=True)]
                break
            step()
        source.close()  # type: ignore[attr-defined]
        return {
            "gbs": payload / GB / elapsed,
            "tok_s": tokens / elapsed,
            "cpu_s_per_gb": cpu / (payload / GB),
            "wait_share": waited / elapsed,
            "mean_wait_ms": waited / timed * 1000,
            "server_cpu_s_per_gb": sum(served) / (payload / GB),
            "server_processes": len(served),
            "busiest_server_share": max(served) / sum(served) if sum(served) > 0 else None,
        }

    try:
        if variant not in GPU_VARIANTS:
            return consume(delivered(), lambda: None)
        return _on_gpu(consume, delivered, spec, n, feed is None)
    finally:
        if feed is not None:
            feed.close()


def _served_from(source_variant: str) -> str:
    """Which server a source reads through: "service", "uncompressed", "direct", or none (""), as `spec` names their
    URLs and processes."""
    source_variant = PROCESSES.get(source_variant, source_variant)
    if source_variant == "service-uncompressed":
        return "uncompressed"
    if source_variant.startswith("service"):
        return "service"
    return "direct" if source_variant == "direct" else ""


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (a replica's worker processes), from /proc."""
    found, i = [pid], 0
    while i < len(found):
        for task in Path(f"/proc/{found[i]}/task").glob("*/children"):
            found += [int(child) for child in task.read_text().split()]
        i += 1
    return found


def _on_gpu(consume: Callable, delivered: Callable, spec: dict, n: int, pinned_ahead: bool) -> dict:
    import torch

    from client import DeviceFeed

    depth = 2
    if pinned_ahead:
        # torch's caching host allocator keeps freed pinned blocks: one for every batch that can be alive at once
        # (those assembled ahead, those queued and in flight in the feed, its slots), allocated and freed here
        longest = spec["tokens"] * spec["layers"] * spec["hidden"] * 2 * spec["batch"]
        blocks = [torch.empty(longest, dtype=torch.uint8, pin_memory=True) for _ in range(n + 2 * depth + 3)]
        del blocks
    cycles = _cycles_per_ms() * spec["step_ms"]

    def step() -> None:
        torch.cuda._sleep(int(cycles))
        torch.cuda.current_stream().synchronize()

    return consume(iter(DeviceFeed(delivered(), "cuda", depth=depth)), step)


def _cycles_per_ms() -> float:
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    begin.record()
    torch.cuda._sleep(100_000_000)
    end.record()
    end.synchronize()
    return 100_000_000 / begin.elapsed_time(end)


# -- the set-up, the rounds and the record -----------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a JSON spec: run one measurement, print its figures
    parser.add_argument("--quick", action="store_true", help="12 entries (4 direct), cores 1,2, one round")
    parser.add_argument("--entries", type=int, default=48)
    parser.add_argument("--direct-entries", type=int, default=12, help="fewer: moto holds them in memory, slowly")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--batch", type=int, default=4, help="entries per batch")
    parser.add_argument("--cores", default="1,2,4,8,12")
    parser.add_argument("--server-processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=100.0, help="the synthetic step of the gpu variant")
    parser.add_argument("--gpu-batch", type=int, default=8, help="entries per batch of the gpu variant")
    parser.add_argument(
        "--variants", help="a comma-separated subset (default: every one this machine can run); the anchor always runs"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return
    if args.quick:
        args.entries, args.direct_entries, args.cores, args.rounds = 12, 4, "1,2", 1
    import torch

    from benchmarks.serve import populate, start_service
    from client import FeatureClient
    from schemas.codecs import StoreCodec
    from service.main import build_services
    from service.settings import Settings

    has_moto = all(importlib.util.find_spec(m) is not None for m in ("moto", "boto3"))
    variants = [v for v in CPU_VARIANTS if v != "direct" or has_moto] + (
        list(GPU_VARIANTS) if torch.cuda.is_available() else []
    )
    if args.variants:
        variants = [v for v in variants if v in args.variants.split(",") or v == "anchor"]
    available = sorted(os.sched_getaffinity(0))
    counts = [n for n in map(int, args.cores.split(",")) if n <= len(available)]
    # the service's processes on the cores the client does not use, where there are enough of them
    spare = available[max(counts) :] if len(available) - max(counts) >= 2 else available
    work = Path(tempfile.mkdtemp(prefix="hsstore-feed-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    processes: list[subprocess.Popen] = []
    try:
        root = work / "store"
        services = build_services(Settings(data_dir=root))
        manifests, _, _ = populate(services.recorder, args.entries, args.tokens, args.hidden)
        services.close()
        server, url = start_service(root, {}, args.server_processes, spare)
        processes.append(server)
        anchor = work / "anchor"
        subprocess.run(
            [sys.executable, "-m", "hsstore.cli", "export", str(anchor), "--format", "specforge", "--url", url],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        index = json.loads((anchor / "hsstore_export.json").read_text())
        files = {e["content_hash"]: str(anchor / e["file"]) for e in index["entries"]}
        urls, servers = {"service": url}, {"service": [server.pid]}
        if any(v.startswith("service-uncompressed") for v in variants):
            plain = work / "uncompressed"
            services = build_services(Settings(data_dir=plain, codec=StoreCodec.UNCOMPRESSED))
            populate(services.recorder, args.entries, args.tokens, args.hidden)  # the same entries, bit for bit
            services.close()
            server, urls["uncompressed"] = start_service(plain, {}, args.server_processes, spare)
            processes.append(server)
            servers["uncompressed"] = [server.pid]
        if any("cache" in v or v == "gpu-staged" for v in variants):
            with FeatureClient(url, cache=work / "cache") as warm:  # fills the cache: epoch 2 onwards reads it
                warm.get_many([m.feature_key() for m in manifests])
        moto_raw: dict[str, float] = {}
        if "direct" in variants:
            started = len(processes)
            urls["direct"], moto_raw = _direct(work, args, spare, processes)
            servers["direct"] = [p.pid for p in processes[started:]]  # moto and the service handing out its URLs
        keys = [m.feature_key().model_dump(exclude_none=True) for m in manifests]
        spec = {
            "keys": keys,
            "files": files,
            "urls": urls,
            "servers": servers,
            "cache_dir": str(work / "cache"),
            "batch": args.batch,
            "layers": 5,
            "tokens": args.tokens,
            "hidden": args.hidden,
            "step_ms": args.step_ms,
        }
        rounds: dict[str, dict[int, list[dict]]] = {v: {} for v in variants}  # every round's figures
        for _ in range(args.rounds):
            for n in counts:
                for variant in variants:
                    entries, batch = keys, args.batch
                    if variant == "direct":
                        entries = keys[: args.direct_entries]
                    if variant in GPU_VARIANTS:  # bigger batches: 100 ms steps would bound 4 entries each
                        batch = args.gpu_batch
                    figures = _run({**spec, "variant": variant, "cores": n, "keys": entries, "batch": batch})
                    rounds[variant].setdefault(n, []).append(figures)
                    print(f"{variant:<31} {n:>2} cores {json.dumps(figures)}", file=sys.stderr)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    record = _record(args, rounds, moto_raw, len(available))
    _print(record)
    if args.out:
        args.out.write_text(json.dumps(record, indent=2))
    print(json.dumps(record))


def _direct(work: Path, args, cores: list[int], processes: list) -> tuple[str, dict[str, float]]:
    """A store in moto's bucket, a service over it handing out presigned URLs, and moto's own ranged-GET rate."""
    import boto3

    from benchmarks.serve import populate, start_moto, start_service
    from service.main import build_services
    from service.settings import Settings

    moto, endpoint = start_moto(cores)
    processes.append(moto)
    os.environ.update(S3_KEYS)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="hsstore-feed")
    env = {"HSSTORE_STORE_URL": "s3://hsstore-feed/features", "HSSTORE_S3_ENDPOINT": endpoint}
    root = work / "direct"
    services = build_services(Settings(data_dir=root, store_url=env["HSSTORE_STORE_URL"], s3_endpoint=endpoint))
    manifests, _, _ = populate(services.recorder, args.direct_entries, args.tokens, args.hidden)
    services.close()
    server, url = start_service(root, env, 1, cores)
    processes.append(server)
    return url, _raw_rate(url, s3, manifests)


def _raw_rate(url: str, s3, manifests: list) -> dict[str, float]:
    """moto's own rate for the very ranged GETs direct reads make (each entry's runs of chunks, on the presigned
    URLs the service hands out), raw bytes and no checks, 8 at a time, read two ways: through the client's own
    sockets into reused buffers, and through boto3. The better of the two is the bound direct reads are held to."""
    import httpx

    from client.bodies import Connections, fill
    from client.direct import _runs
    from client.keys import batch_item
    from schemas.api import BatchRequest
    from schemas.chunk_body import DirectEntries

    asked = BatchRequest(keys=[batch_item(m.feature_key()) for m in manifests])
    answer = httpx.post(f"{url}/v1/features:locate", json=asked.model_dump(mode="json", exclude_none=True))
    located = DirectEntries.model_validate_json(answer.raise_for_status().content)
    runs = [run for entry in located.entries for run in _runs(entry)]
    sockets, mine = Connections(timeout=60), threading.local()

    def lean(run: tuple[str, int, int, int]) -> int:
        signed, at, _, length = run
        if getattr(mine, "view", None) is None or mine.view.nbytes < length:
            mine.view = memoryview(bytearray(length))
        with sockets.open("GET", signed, {"Range": f"bytes={at}-{at + length - 1}"}) as response:
            return fill(mine.view[:length], response)

    def boto(run: tuple[str, int, int, int]) -> int:
        signed, at, _, length = run
        bucket, key = urlsplit(signed).path.lstrip("/").split("/", 1)
        return len(s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={at}-{at + length - 1}")["Body"].read())

    rates = {"lean": 0.0, "boto3": 0.0}
    for name, read in (("lean", lean), ("boto3", boto)) * 2:  # interleaved, the better of two passes each
        start = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            got = sum(pool.map(read, runs))
        rates[name] = max(rates[name], got / GB / (time.perf_counter() - start))
    return rates


def _run(spec: dict) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", json.dumps(spec)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{spec['variant']} on {spec['cores']} cores failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _record(args, rounds: dict[str, dict[int, list[dict]]], moto_raw: dict[str, float], cpus: int) -> dict:
    import platform

    import torch

    from benchmarks.records import record_header

    # per variant and core count, the best round counts
    best = {name: {n: max(runs, key=lambda f: f["gbs"]) for n, runs in per.items()} for name, per in rounds.items()}
    anchor = best["anchor"]
    variants = {}
    for name, per_count in best.items():
        top = max(per_count, key=lambda n: per_count[n]["gbs"])
        figures = dict(per_count[top])
        figures["cores"] = top
        figures["over_anchor"] = figures["gbs"] / max(a["gbs"] for a in anchor.values())
        if name == "direct":
            figures["object_store_raw_gbs"] = max(moto_raw.values())  # the better of the two raw clients
            figures["object_store_raw_gbs_by_client"] = moto_raw
            figures["over_object_store"] = figures["gbs"] / max(moto_raw.values())
        first = per_count[min(per_count)]["gbs"] / min(per_count)
        variants[name] = {
            **figures,
            "scaling": {str(n): per_count[n]["gbs"] for n in sorted(per_count)},
            "scaling_over_linear": {str(n): per_count[n]["gbs"] / (first * n) for n in sorted(per_count)},
            "over_anchor_per_cores": {str(n): per_count[n]["gbs"] / anchor[n]["gbs"] for n in sorted(per_count)},
            "rounds_gbs": {str(n): [f["gbs"] for f in rounds[name][n]] for n in sorted(per_count)},
        }
    return {
        **record_header(),
        "machine": {"cpus": cpus, "platform": platform.platform(), "cuda": torch.cuda.is_available()},
        "entries": args.entries,
        "direct_entries": args.direct_entries,
        "shape": [args.tokens, 5, args.hidden],
        "batch": args.batch,
        "gpu_batch": args.gpu_batch,
        "step_ms": args.step_ms,
        "server_processes": args.server_processes,
        "rounds": args.rounds,
        "object_store": "moto server (Python) on 127.0.0.1" if moto_raw else "none: the direct variant did not run",
        "variants": variants,
    }


def _print(record: dict) -> None:
    heads = f"{'best GB/s':>10}{'cores':>6}{'tok/s':>10}{'CPU-s/GB':>9}{'wait':>6}{'x anchor':>9}"
    print(f"{'variant':<31}{heads}  scaling")
    for name, v in record["variants"].items():
        scaling = " ".join(f"{n}:{g:.2f}" for n, g in v["scaling"].items())
        print(
            f"{name:<31}{v['gbs']:>10.2f}{v['cores']:>6}{v['tok_s']:>10,.0f}{v['cpu_s_per_gb']:>9.2f}"
            f"{v['wait_share']:>6.0%}{v['over_anchor']:>9.2f}  {scaling}"
        )


if __name__ == "__main__":
    main()
