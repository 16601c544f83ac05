"""Where the GPU waits in one pack: every idle gap between two kernels on the compute stream, charged to the op that
launched the kernel after it (the host was still getting there) or to the host call that blocked before it (a sync),
plus how long the host took to issue the pack against how long the GPU took to run it.

    python benchmarks/gpu_gaps.py --target fp8 --mix short --out benchmarks/results/gpu-gaps-fp8-h100.json

A pack of the mix's median sequence count is run lean (the forward and its copies, nothing written) twice untimed, then
timed without the profiler, four times each way interleaved (each round starting one way further on): as the code runs
now, and with each of its recent changes undone (`changes()`, with a placebo that undoes nothing: the name of the
record's `pack_ms_without_<change>` and `speedup_of_<change>`), medians (`issue_ms`: until the last result was handed
out; `pack_ms`: until the GPU finished); then once under the profiler, whose chrome trace is read here: a kernel's gap
is the time its stream sat idle before it, and the launching op is the innermost CPU op around the runtime or driver
call of the same correlation id; then once more with python stacks, each gap charged to the innermost line of this
project's code or the model's around that call (`idle_ms_by_line_with_stacks`; the stacks slow the host, so only the
shares mean something).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.extract import MIXES, lengths_totalling, random_ids
from benchmarks.records import record_header
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from schemas.samples import parse_sample
from service.extraction import packing
from service.extraction.packing import plan_packs
from service.main import build_services
from service.model import fused
from service.model.synthetic import build_synthetic, to_fp8
from service.settings import Settings

SYNCS = ("Synchronize", "cudaMemcpy ", "cudaMemcpy\0")  # runtime calls that block the host on the GPU
API_CALLS = ("cuda_runtime", "cuda_driver")  # Triton launches through the driver (cuLaunchKernel), torch the runtime
# Frames whose code is this project's or the model's: the innermost names the line a gap is charged to
OWN_FRAMES = ("service/", "compute/", "modeling_")


def changes() -> dict[str, tuple[tuple[object, str, object], ...]]:
    """The recent changes, each undone by what it patches: (module, name, value before the change)."""
    from service.model import fp8_kernels  # Triton: imported on the device only

    return {
        "nothing": (),  # a placebo: what the interleaving alone makes of the same code (the A/B's noise floor)
        "pack_rows": ((fp8_kernels, "PACK_ROWS", 1),),  # the pack quantizer one row a program
        "conv_in_place": ((packing, "_conv_output_into", lambda rows: contextlib.nullcontext()),),  # copied after
        "fused_rotary": ((fused, "_rotary", lambda kernels, eager: eager),),  # the eager function stays in place
        "wide_qkv_copy": ((packing, "contiguous", lambda x: x),),  # fla's input guard copies q, k, v itself
    }


@contextlib.contextmanager
def patched(module: object, name: str, value: object) -> Iterator[None]:
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def lean(extractor, items, featureset) -> tuple[float, float]:
    """(ms until the last result was handed out, ms until the GPU finished) for one lean pass."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    pending = [p for _, p in extractor.extract_many(items, featureset, Backend.FLA)]
    issued = time.perf_counter() - t
    for p in pending:
        p.wait()
    torch.cuda.synchronize()
    return issued * 1000, (time.perf_counter() - t) * 1000


DEVICE_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")


class Enclosing:
    """The innermost of some host events (ops, python frames) around a runtime call of the same thread."""

    def __init__(self, events: list[dict]) -> None:
        self.by_tid: dict = defaultdict(list)
        for e in sorted(events, key=lambda e: e["ts"]):
            self.by_tid[e["tid"]].append(e)
        self.starts = {tid: [e["ts"] for e in found] for tid, found in self.by_tid.items()}

    def around(self, call: dict) -> dict | None:
        found = self.by_tid.get(call["tid"], [])
        # back from the last event started before the call: the first that encloses it is the innermost
        for index in range(bisect.bisect_right(self.starts.get(call["tid"], []), call["ts"]) - 1, -1, -1):
            if found[index]["ts"] + found[index]["dur"] >= call["ts"] + call["dur"]:
                return found[index]
        return None


def read_trace(trace: dict) -> tuple[list[dict], dict, list[dict]]:
    """(its complete events, runtime calls by correlation id, the busiest stream's kernels in order)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    runtime = {e["args"].get("correlation"): e for e in events if e.get("cat") in API_CALLS}
    streams: dict = defaultdict(list)
    for k in sorted((e for e in events if e.get("cat") in DEVICE_KINDS), key=lambda e: e["ts"]):
        streams[k["args"].get("stream")].append(k)
    return events, runtime, max(streams.values(), key=len)


def idle_gaps(compute: list[dict]) -> list[tuple[dict, float]]:
    """(the kernel, µs its stream sat idle before it) for every gap; back to back leaves ~1-2 µs."""
    found = ((after, after["ts"] - (before["ts"] + before["dur"])) for before, after in itertools.pairwise(compute))
    return [(kernel, gap) for kernel, gap in found if gap > 2]


def _own(frame: str) -> str | None:
    """A python frame's name from its project or model path on ("service/extraction/stats.py(30): layer_summary"),
    None for frames of other code."""
    at = min((i for i in (frame.find(marker) for marker in OWN_FRAMES) if i >= 0), default=-1)
    return frame[at:] if at >= 0 else None


def idle_by_project_line(trace: dict) -> dict[str, float]:
    """Idle ms by the innermost line of this project's code on the stack of the call that launched the kernel after
    the gap (a trace recorded `with_stack`: python frames are events enclosing what they called)."""
    events, runtime, compute = read_trace(trace)
    frames = Enclosing([e for e in events if e.get("cat") == "python_function" and _own(e["name"]) is not None])
    idle: Counter = Counter()
    for kernel, gap in idle_gaps(compute):
        call = runtime.get(kernel["args"].get("correlation"))
        frame = frames.around(call) if call is not None else None
        idle[(_own(frame["name"]) if frame is not None else None) or "?"] += gap
    return {k: round(v / 1000, 2) for k, v in idle.most_common(25)}


def gaps(trace: dict) -> dict:
    events, runtime, compute = read_trace(trace)
    ops = Enclosing([e for e in events if e.get("cat") == "cpu_op"])

    def launcher(kernel: dict) -> str:
        call = runtime.get(kernel["args"].get("correlation"))
        if call is None:
            return "?"
        op = ops.around(call)
        return op["name"] if op is not None else call["name"]

    idle_by_op: Counter = Counter()
    count_by_op: Counter = Counter()
    found = idle_gaps(compute)
    for kernel, gap in found:
        name = launcher(kernel)
        idle_by_op[name] += gap
        count_by_op[name] += 1
    idle = sum(gap for _, gap in found)
    span = compute[-1]["ts"] + compute[-1]["dur"] - compute[0]["ts"]
    syncs = [e for e in events if e.get("cat") in API_CALLS and any(s in e["name"] + "\0" for s in SYNCS)]
    launches = Counter(e["name"] for e in events if e.get("cat") in API_CALLS and "aunch" in e["name"])
    return {
        "compute_stream_kernels": len(compute),
        "compute_span_ms": span / 1000,
        "compute_idle_ms": idle / 1000,
        "compute_idle_share": idle / span,
        "idle_ms_by_next_launcher": {k: round(v / 1000, 2) for k, v in idle_by_op.most_common(25)},
        "gaps_by_next_launcher": dict(count_by_op.most_common(25)),
        "host_syncs": {
            "calls": len(syncs),
            "ms": sum(e["dur"] for e in syncs) / 1000,
            "by_name": dict(Counter(e["name"] for e in syncs)),
        },
        "launch_calls": dict(launches),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", choices=("bf16", "fp8"), default="fp8")
    parser.add_argument("--mix", choices=tuple(MIXES), default="short")
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--pack-tokens", type=int, default=16384)
    parser.add_argument("--cuda-graphs", choices=("auto", "true", "false"), default="auto")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    record: dict = {**record_header()}
    loaded = build_synthetic("cuda", num_layers=args.layers)
    if args.target == "fp8":
        to_fp8(loaded)
    graphs = args.cuda_graphs if args.cuda_graphs == "auto" else args.cuda_graphs == "true"
    store = Path(tempfile.mkdtemp(prefix="hsstore-gaps-"))
    settings = Settings(data_dir=store, device="cuda", pack_tokens=args.pack_tokens, cuda_graphs=graphs)
    services = build_services(settings, loaded)
    extractor, spec = services.models.extractor(), services.models.spec
    featureset = FeatureSet.default_for(args.layers)
    extractor.plan(Backend.FLA)  # its one-time probe and memory plan, untimed
    record["run"] = extractor.device_run(featureset, Backend.FLA).model_dump(mode="json")

    low, high = MIXES[args.mix]
    seed = list(MIXES).index(args.mix)
    lengths = lengths_totalling(400_000, low, high, seed=10 + seed)
    ids = random_ids(lengths, int(loaded.config.vocab_size), seed=20 + seed)
    policy = extractor.pack_policy
    assert policy is not None, "packs run on CUDA only"
    packs = plan_packs(lengths, policy)
    counts = sorted(len(p.segments) for p in packs)
    pack = next(p for p in packs if len(p.segments) == counts[len(counts) // 2])
    items = [(spec.encode(parse_sample({"token_ids": ids[s.index]}), 1 << 20), "gaps") for s in pack.segments]
    record["pack"] = {
        "sequences": len(pack.segments),
        "tokens": sum(s.length for s in pack.segments),
        "lengths": [s.length for s in pack.segments],
    }
    for _ in range(2):
        lean(extractor, items, featureset)
    # side by side, interleaved: the code as it is, and with each change undone
    without = changes()
    timed: dict[str, list[tuple[float, float]]] = {way: [] for way in ("now", *without)}
    ways = list(timed)
    for round_ in range(4):
        for way in ways[round_:] + ways[:round_]:
            with contextlib.ExitStack() as undone:
                for module, name, value in without.get(way, ()):
                    undone.enter_context(patched(module, name, value))
                timed[way].append(lean(extractor, items, featureset))
    for way, runs in timed.items():
        suffix = "" if way == "now" else f"_without_{way}"
        record[f"issue_ms{suffix}"] = statistics.median(t[0] for t in runs)
        record[f"pack_ms{suffix}"] = statistics.median(t[1] for t in runs)
        if way != "now":  # "now" comes first: its pack_ms is recorded
            record[f"speedup_of_{way}"] = record[f"pack_ms{suffix}"] / record["pack_ms"]
    record["tok_s"] = record["pack"]["tokens"] / record["pack_ms"] * 1000
    shown = ("pack", "issue_ms", "pack_ms", "tok_s", *(k for k in record if k.startswith(("pack_ms_", "speedup_"))))
    print(json.dumps({k: record[k] for k in shown}), flush=True)

    from torch.profiler import ProfilerActivity, profile

    def traced(with_stack: bool) -> dict:
        """The chrome trace of one lean pass under the profiler."""
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=with_stack) as prof:
            lean(extractor, items, featureset)
        with tempfile.NamedTemporaryFile(suffix=".json") as trace:
            prof.export_chrome_trace(trace.name)
            return json.loads(Path(trace.name).read_text())

    record["profiled"] = gaps(traced(with_stack=False))
    print(json.dumps(record["profiled"]), flush=True)
    # again with python stacks (slower on the host, so only for where the gaps come from)
    record["idle_ms_by_line_with_stacks"] = idle_by_project_line(traced(with_stack=True))
    print(json.dumps(record["idle_ms_by_line_with_stacks"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
