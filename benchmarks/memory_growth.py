"""What grows per extracted entry and per distinct shape (#63): the writer's path in-process, built as `hsstore serve`
builds it (`build_services`: the heap bounded, the tiny model on the CPU), extracting flat out, per workload:

  lengths   4 sequences a request of token ids, each of a length of its own (16-512): a shape per sequence
  one       4 sequences a request of 128 tokens each: one shape, every sequence new
  texts     2 texts a request of 20-300 words, tokenised by the service: the chat soak's kind of sample

After a warm-up of 40 requests, every 50 requests: the process's RSS split into anonymous and file-backed pages
(/proc/self/status), glibc's heap (mallinfo2: in use, free, mapped blocks) and, with `--trace`, what Python's
allocator holds (tracemalloc, which slows the run) with the tracebacks that grew most. So growth per entry and per
shape can be told apart from the allocator's and from mapped files.

    python benchmarks/memory_growth.py --requests 400 --out benchmarks/results/memory-growth-cpu.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import random
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from schemas.api import ExtractRequest
from service.main import build_services
from service.model.devmodel import build_devmodel
from service.settings import Settings

MIB = 1 << 20
WORDS = ("alpha", "beta", "gamma", "delta", "hidden", "state", "store", "zarr", "token", "layer")


class Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            *("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks"),
            "keepcost",
        )
    ]


def _mallinfo() -> Callable[[], Mallinfo2] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Mallinfo2
    except (OSError, AttributeError):  # not glibc, or one older than 2.33
        return None
    return libc.mallinfo2


def sample(mallinfo: Callable[[], Mallinfo2] | None) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            found[name.lower() + "_mib"] = round(int(value.split()[0]) / 1024, 1)
    if mallinfo is not None:
        info = mallinfo()
        found |= {"heap_in_use_mib": round(info.uordblks / MIB, 1), "heap_free_mib": round(info.fordblks / MIB, 1)}
        found["heap_mapped_mib"] = round(info.hblkhd / MIB, 1)
    if tracemalloc.is_tracing():
        found["python_traced_mib"] = round(tracemalloc.get_traced_memory()[0] / MIB, 1)
    return found


def requests(workload: str, rng: random.Random) -> Callable[[], ExtractRequest]:
    def ids(n: int) -> dict[str, Any]:
        return {"token_ids": [rng.randrange(5, 1000) for _ in range(n)]}

    def text() -> dict[str, Any]:
        return {"text": " ".join(f"{rng.choice(WORDS)}{rng.randrange(1000)}" for _ in range(rng.randint(20, 300)))}

    made: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "lengths": lambda: [ids(rng.randint(16, 512)) for _ in range(4)],
        "one": lambda: [ids(128) for _ in range(4)],
        "texts": lambda: [text() for _ in range(2)],
    }
    return lambda: ExtractRequest(samples=made[workload]())


def run(workload: str, count: int, trace: bool, work: Path, model: Path) -> dict[str, Any]:
    settings = Settings(data_dir=work / workload, model_dir=model, device="cpu", canary=False)
    services = build_services(settings)
    mallinfo, make = _mallinfo(), requests(workload, random.Random(0))
    for _ in range(40):  # the warm-up: the first calls' caches, the catalog's first pages
        services.writer.extract(make())
    gc.collect()
    if trace:
        tracemalloc.start(12)
    before = tracemalloc.take_snapshot() if trace else None
    samples = [{"requests": 0, "s": 0.0, **sample(mallinfo)}]
    entries, started = 0, time.perf_counter()
    for done in range(1, count + 1):
        entries += len(services.writer.extract(make()).results)
        if done % 50 == 0 or done == count:
            samples.append({"requests": done, "s": round(time.perf_counter() - started, 1), **sample(mallinfo)})
            print(workload, samples[-1], flush=True)
    grew: list[dict[str, Any]] = []
    if before is not None:
        gc.collect()
        for stat in tracemalloc.take_snapshot().compare_to(before, "traceback")[:5]:
            grew.append({"kib": stat.size_diff >> 10, "blocks": stat.count_diff, "at": stat.traceback.format()[-6:]})
        tracemalloc.stop()
    services.close()
    first, last = samples[0], samples[-1]
    return {
        "entries": entries,
        "samples": samples,
        "vmrss_growth_mib": round(last["vmrss_mib"] - first["vmrss_mib"], 1),
        "vmrss_growth": round(last["vmrss_mib"] / first["vmrss_mib"] - 1, 4),
        "kib_per_entry": round((last["vmrss_mib"] - first["vmrss_mib"]) * 1024 / max(entries, 1), 2),
        "python_grew": grew,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="timed requests per workload, after the warm-up")
    parser.add_argument("--workloads", nargs="+", default=["lengths", "one", "texts"])
    parser.add_argument("--trace", action="store_true", help="tracemalloc's view of Python's allocations too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hsstore-growth-"))
    model = build_devmodel(work / "model")
    record = {**record_header(), "workloads": {}}
    for workload in args.workloads:  # one process: each workload's services on a store of its own
        record["workloads"][workload] = run(workload, args.requests, args.trace, work, model)
    for workload, found in record["workloads"].items():
        print(
            f"{workload}: {found['entries']} entries, RSS {found['samples'][0]['vmrss_mib']} -> "
            f"{found['samples'][-1]['vmrss_mib']} MiB ({found['vmrss_growth']:+.1%}, {found['kib_per_entry']} KiB "
            "an entry)"
        )
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
