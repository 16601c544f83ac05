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
  cache-processes, service-processes   the same sources through `ProcessFeed`: the n cores split among worker
           processes of two cores each, three batches each at once, every batch collated (verified) into shared
           memory this process maps
  direct   chunks read straight from an S3-API server (moto here, which bounds it: its own raw ranged-GET rate is
           reported beside it), verified
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
best round counts. Per variant and core count:
GB/s and tokens/s delivered, client CPU-s/GB (with a `ProcessFeed`'s workers), the share of the loop spent waiting,
and the ratio to the anchor at the same core count.
The last line is the JSON record.

    python benchmarks/feed.py --quick                                   # a few minutes on 2 cores
    python benchmarks/feed.py --out benchmarks/results/feed-cpu.json
    python benchmarks/feed.py --cores 1,2,4,8,12 --out benchmarks/results/feed-h200host.json   # on the GPU host
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
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

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
PROCESSES = {"cache-processes": "cache", "service-processes": "service"}
PER_ENTRY = ("service-per-entry", "gpu-staged")  # decoded and checked into arrays of their own, then collated
S3_KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


# -- one measurement, in a process of its own ------------------------------------------------------------------
def measure(spec: dict) -> dict:
    """Deliver every batch of `spec` once from `spec["variant"]` on `spec["cores"]` cores; the figures."""
    import torch

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
    if source_variant.startswith("anchor"):

        def sample(key: FeatureKey) -> dict:
            record = torch.load(spec["files"][key.content_hash], mmap=True, weights_only=True)
            ids = record["input_ids"]
            hidden = record["hidden_states"].view(ids.shape[0], spec["layers"], -1)
            return {"hidden_states": hidden, "input_ids": ids, "content_hash": key.content_hash}

    elif source_variant in PROCESSES:
        from client import ProcessFeed

        feed = ProcessFeed(
            spec["url"],
            processes=max(1, n // 2),
            threads=3,
            cache_dir=spec["cache_dir"] if PROCESSES[source_variant] == "cache" else None,
            pin_memory=pin,
        )
    else:
        from client.torch_data import fetch_sample, to_sample

        url = {"direct": spec["direct_url"], "service-uncompressed": spec["uncompressed_url"]}.get(
            source_variant, spec["url"]
        )
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

    def cpu_seconds() -> float:
        """This process's CPU time, and its feed's worker processes'."""
        pids = feed.pids if feed is not None else []
        ticks = 0
        for pid in pids:  # utime and stime, the 14th and 15th fields of /proc/PID/stat
            ticks += sum(map(int, Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13]))
        return time.process_time() + ticks / os.sysconf("SC_CLK_TCK")

    def consume(source: Iterator[dict], step: Callable[[], None]) -> dict:
        payload, tokens, waited, cpu, start = 0, 0, 0.0, 0.0, 0.0
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
                cpu, start = cpu_seconds(), arrived
            if index == last:
                elapsed, cpu = arrived - start, cpu_seconds() - cpu
                break
            step()
        source.close()  # type: ignore[attr-defined]
        return {
            "gbs": payload / GB / elapsed,
            "tok_s": tokens / elapsed,
            "cpu_s_per_gb": cpu / (payload / GB),
            "wait_share": waited / elapsed,
            "mean_wait_ms": waited / timed * 1000,
        }

    try:
        if variant not in GPU_VARIANTS:
            return consume(delivered(), lambda: None)
        return _on_gpu(consume, delivered, spec, n, feed is None)
    finally:
        if feed is not None:
            feed.close()


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
        plain = work / "uncompressed"
        services = build_services(Settings(data_dir=plain, codec=StoreCodec.UNCOMPRESSED))
        populate(services.recorder, args.entries, args.tokens, args.hidden)  # the same entries, bit for bit
        services.close()
        server, uncompressed_url = start_service(plain, {}, args.server_processes, spare)
        processes.append(server)
        with FeatureClient(url, cache=work / "cache") as warm:  # fills the cache: epoch 2 onwards reads it
            warm.get_many([m.feature_key() for m in manifests])

        has_moto = all(importlib.util.find_spec(m) is not None for m in ("moto", "boto3"))
        direct_url, moto_raw = _direct(work, args, spare, processes) if has_moto else ("", 0.0)
        keys = [m.feature_key().model_dump(exclude_none=True) for m in manifests]
        spec = {
            "keys": keys,
            "files": files,
            "url": url,
            "direct_url": direct_url,
            "uncompressed_url": uncompressed_url,
            "cache_dir": str(work / "cache"),
            "batch": args.batch,
            "layers": 5,
            "tokens": args.tokens,
            "hidden": args.hidden,
            "step_ms": args.step_ms,
        }
        variants = [v for v in CPU_VARIANTS if v != "direct" or has_moto] + (
            list(GPU_VARIANTS) if torch.cuda.is_available() else []
        )
        if args.variants:
            variants = [v for v in variants if v in args.variants.split(",") or v == "anchor"]
        best: dict[str, dict[int, dict]] = {v: {} for v in variants}
        for _ in range(args.rounds):
            for n in counts:
                for variant in variants:
                    entries, batch = keys, args.batch
                    if variant == "direct":
                        entries = keys[: args.direct_entries]
                    if variant in GPU_VARIANTS:  # bigger batches: 100 ms steps would bound 4 entries each
                        batch = args.gpu_batch
                    figures = _run({**spec, "variant": variant, "cores": n, "keys": entries, "batch": batch})
                    if n not in best[variant] or figures["gbs"] > best[variant][n]["gbs"]:
                        best[variant][n] = figures
                    print(f"{variant:<22} {n:>2} cores {json.dumps(figures)}", file=sys.stderr)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    record = _record(args, best, counts, moto_raw, len(available))
    _print(record)
    if args.out:
        args.out.write_text(json.dumps(record, indent=2))
    print(json.dumps(record))


def _direct(work: Path, args, cores: list[int], processes: list) -> tuple[str, float]:
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
    populate(services.recorder, args.direct_entries, args.tokens, args.hidden)
    services.close()
    server, url = start_service(root, env, 1, cores)
    processes.append(server)
    objects = [
        o for page in s3.get_paginator("list_objects_v2").paginate(Bucket="hsstore-feed") for o in page["Contents"]
    ]
    biggest = max(objects, key=lambda o: o["Size"])
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:  # moto's own rate: 8 ranged GETs of 8 MiB at a time, raw bytes, no checks
        ranges = [(a, min(a + (8 << 20), biggest["Size"]) - 1) for a in range(0, biggest["Size"], 8 << 20)] * 2
        got = pool.map(
            lambda r: len(
                s3.get_object(Bucket="hsstore-feed", Key=biggest["Key"], Range=f"bytes={r[0]}-{r[1]}")["Body"].read()
            ),
            ranges,
        )
        size = sum(got)
    return url, size / GB / (time.perf_counter() - start)


def _run(spec: dict) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", json.dumps(spec)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{spec['variant']} on {spec['cores']} cores failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _record(args, best: dict[str, dict[int, dict]], counts: list[int], moto_raw: float, cpus: int) -> dict:
    import platform

    import torch

    from benchmarks.records import record_header

    anchor = best["anchor"]
    variants = {}
    for name, per_count in best.items():
        top = max(per_count, key=lambda n: per_count[n]["gbs"])
        figures = dict(per_count[top])
        figures["cores"] = top
        figures["over_anchor"] = figures["gbs"] / max(a["gbs"] for a in anchor.values())
        if name == "direct":
            figures["object_store_raw_gbs"] = moto_raw
            figures["over_object_store"] = figures["gbs"] / moto_raw
        first = per_count[min(per_count)]["gbs"] / min(per_count)
        variants[name] = {
            **figures,
            "scaling": {str(n): per_count[n]["gbs"] for n in sorted(per_count)},
            "scaling_over_linear": {str(n): per_count[n]["gbs"] / (first * n) for n in sorted(per_count)},
            "over_anchor_per_cores": {str(n): per_count[n]["gbs"] / anchor[n]["gbs"] for n in sorted(per_count)},
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
        "object_store": "moto server (Python) on 127.0.0.1" if moto_raw else "none: moto is not installed here",
        "variants": variants,
    }


def _print(record: dict) -> None:
    heads = f"{'best GB/s':>10}{'cores':>6}{'tok/s':>10}{'CPU-s/GB':>9}{'wait':>6}{'x anchor':>9}"
    print(f"{'variant':<22}{heads}  scaling")
    for name, v in record["variants"].items():
        scaling = " ".join(f"{n}:{g:.2f}" for n, g in v["scaling"].items())
        print(
            f"{name:<22}{v['gbs']:>10.2f}{v['cores']:>6}{v['tok_s']:>10,.0f}{v['cpu_s_per_gb']:>9.2f}"
            f"{v['wait_share']:>6.0%}{v['over_anchor']:>9.2f}  {scaling}"
        )


if __name__ == "__main__":
    main()
