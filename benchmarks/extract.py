"""Extraction benchmark on one GPU, 27B shape, 5 DFlash layers, two length mixes side by side in one process:

  short  128-2048 tokens per sequence (real drafter data: chat prompts plus completions)
  long   256-8192 tokens

per mix, in turn:
  naive  HF `model(input_ids, output_hidden_states=True)` (logits included), one sequence at a time, layers picked
         from the tuple: the forward alone, nothing copied or written; over the mix's first `--naive-tokens` (its
         tok/s is per sequence, so a prefix measures it as the whole would, in a fraction of the time). Its full
         attention is pinned to the kernel the service pins (FlashAttention), so neither side pays cuDNN's plan per
         new length (`sdpa_lengths.py`).
  e2e    the service's extraction path: FeatureWriter.extract over the same sequences (own-rows packs of
         `--pack-tokens` on CUDA, the fused elementwise forwards once proven bit-equal, side-stream copy to pinned
         memory, hashing + compression + zarr write + catalog in writer threads).
  lean   the packed lean forward alone (no hash or write): what the writing pipeline leaves of it, over the first
         `--lean-tokens` of the mix.

Both `e2e` (for the mixes `--e2e-both-layers` names) and `lean` run twice side by side: every decoder layer eager
(`eager_layers`) and layers replayed from CUDA graphs (`replayed`); `{mix}_e2e_tok_s` and `{mix}_lean_tok_s` are
the settings' default's (`cuda_graphs`).

`--target fp8` quantizes the target in place first (Qwen's `-FP8` layout: e4m3 weights in 128 x 128 blocks), so
every side runs the FP8 target. The record says how full the packs were (`fill`: real tokens over pack rows), which
policy ran, and where one short-mix pack's GPU time goes (`--profile-only`: one pack of each mix, nothing else), with
the floor under the exactness contract: the kernels we do not write (GEMMs at the rows the pack runs them at,
attention, fla, the causal conv) against the pack's wall time.

Then an audit of stored entries of both mixes (each re-extracted alone in a pack, so with other neighbours than
when it was stored) and compare reports fla vs torch and fla vs fla-noconv. Prints ratios, writes one JSON record.
`--mixes` runs some of the mixes, each with the sequences and seed it has in a run of both: one mix of 1M tokens and
its audit fit one device call's 600 s.

    python benchmarks/extract.py --short-tokens 1000000 --long-tokens 1000000 --naive-tokens 150000 \
        --lean-tokens 300000 --out benchmarks/results/extract-h200.json   # then --target fp8, fp8-target-h200.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from compute.forward import attention_pinned
from schemas.api import ExtractRequest
from schemas.backend import PINNED_ATTENTION, Backend
from schemas.batching import PackPolicy
from schemas.device_run import LayerMode
from schemas.featureset import FeatureSet
from schemas.keys import FeatureKey
from schemas.samples import parse_sample
from service.extraction.extractor import Extractor
from service.extraction.layer_graphs import graph_recorder
from service.extraction.packing import plan_packs
from service.main import build_services
from service.model.synthetic import build_synthetic, to_fp8
from service.settings import WRITER_THREADS, Settings

GB = 1e9


def lengths_totalling(tokens: int, low: int, high: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    out: list[int] = []
    while sum(out) < tokens:
        out.append(rng.randint(low, high))
    return out


def random_ids(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab - 1024, (n,), generator=generator).tolist() for n in lengths]


class Utilization:
    """nvidia-smi's `utilization.gpu` (the share of each sample period in which a kernel ran) every 100 ms while the
    block runs; `idle_share` is what is left. None where nvidia-smi is missing."""

    def __enter__(self) -> Utilization:
        command = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"]
        self.idle_share: float | None = None
        found = shutil.which(command[0])
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True) if found else None
        return self

    def __exit__(self, *_: object) -> None:
        if self._process is None:
            return
        self._process.terminate()
        out, _ = self._process.communicate(timeout=10)
        samples = [int(line) for line in out.split() if line.strip().isdigit()]
        if samples:
            self.idle_share = 1 - sum(samples) / len(samples) / 100


def peak_since(base: int) -> float:
    return (torch.cuda.max_memory_allocated() - base) / GB


def prefix(sequences: list[list[int]], tokens: int) -> list[list[int]]:
    """The first sequences holding at least `tokens` tokens (all of them for 0)."""
    out: list[list[int]] = []
    for ids in sequences:
        if tokens and sum(map(len, out)) >= tokens:
            break
        out.append(ids)
    return out


def fill(lengths: list[int], policy: PackPolicy | None) -> dict:
    """How full the packs of a job are: real tokens over the rows of every pack planned for it."""
    if policy is None:
        return {"packs": len(lengths), "fill": 1.0}
    packs = plan_packs(lengths, policy)
    return {"packs": len(packs), "fill": sum(lengths) / sum(pack.shape for pack in packs)}


def naive(model: torch.nn.Module, sequences: list[list[int]], layers: list[int]) -> tuple[float, float]:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    with torch.inference_mode(), attention_pinned(PINNED_ATTENTION):
        for ids in sequences:
            out = model(input_ids=torch.tensor([ids], device="cuda"), output_hidden_states=True, use_cache=False)
            features = torch.stack([out.hidden_states[layer + 1] for layer in layers], dim=2)
            del out, features
    torch.cuda.synchronize()
    return time.perf_counter() - start, peak_since(base)


MIXES = {"short": (128, 2048), "long": (256, 8192)}
# kernel name fragments -> where a pack's GPU time goes (the first that matches; the rest is elementwise and copies)
# (attention first: FlashAttention's kernel names carry cutlass types, which the GEMMs' fragments match)
KERNEL_KINDS = (
    ("attention", ("flash_fwd", "fmha", "attention", "softmax")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas")),
    ("gated delta rule (fla)", ("chunk", "solve_tril", "recompute_w_u", "l2norm", "cumsum", "fwd_kernel")),
    ("causal conv", ("conv1d", "causal_conv")),
    ("fused elementwise (ours)", ("rms_tail", "square", "silu_mul", "gated_tail", "inv_rms")),
)
FLOOR_KINDS = ("gemm", "attention", "gated delta rule (fla)", "causal conv")


def released() -> None:
    """Free the GPU memory of closed runs' extractors now (their layer graphs' templates and pools), not at some
    later garbage collection: each run builds its own."""
    gc.collect()
    torch.cuda.empty_cache()


def profile_pack(extractor, items: list, featureset: FeatureSet) -> dict:
    """Where the GPU time of one packed forward (and its copy out) goes, by kind of kernel, against its wall time:
    what the GPU was not busy with is launch gaps and host waits."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        t = time.perf_counter()
        for _, pending in extractor.extract_many(items, featureset, Backend.FLA):
            pending.wait()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t) * 1000
    kinds: dict[str, float] = {}
    kernels: list[tuple[float, str, str, int]] = []
    for event in prof.key_averages():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        name = event.key.lower()
        kind = next((k for k, parts in KERNEL_KINDS if any(p in name for p in parts)), "elementwise and copies")
        kinds[kind] = kinds.get(kind, 0.0) + event.self_device_time_total / 1000
        kernels.append((event.self_device_time_total / 1000, kind, event.key[:90], event.count))
    busy = sum(kinds.values())
    tokens = sum(len(encoded.prompt_ids) for encoded, _ in items)
    # the floor under the exactness contract: the arithmetic of kernels we do not write, each GEMM at the rows the
    # pack runs it at (a sequence's own where its bits depend on M): what the pack would cost if every elementwise
    # pass, copy and launch gap were gone
    gemm_ms = kinds.get("gemm", 0.0)
    theirs_ms = sum(kinds.get(kind, 0.0) for kind in FLOOR_KINDS)
    ops = [  # which torch op launched the GPU time, by the shapes it ran on: where copies and casts come from
        (event.self_device_time_total / 1000, event.key, str(event.input_shapes)[:160], event.count)
        for event in prof.key_averages(group_by_input_shape=True)
        if getattr(event, "device_type", None) == torch.autograd.DeviceType.CPU and event.self_device_time_total > 0
    ]
    return {
        "tokens": tokens,
        "wall_ms": wall_ms,
        "kernel_ms": kinds,
        "floor": {
            "gemm_ms": gemm_ms,
            "gemm_only_tok_s": tokens / gemm_ms * 1000 if gemm_ms else None,
            "kinds": list(FLOOR_KINDS),
            "ms": theirs_ms,
            "tok_s": tokens / theirs_ms * 1000 if theirs_ms else None,
            "share_of_wall": theirs_ms / wall_ms,
        },
        "kernel_share_of_wall": {k: v / wall_ms for k, v in kinds.items()},
        "gpu_busy_share": busy / wall_ms,
        "top_kernels": [
            {"ms": ms, "kind": kind, "kernel": name, "calls": calls}
            for ms, kind, name, calls in sorted(kernels, reverse=True)[:20]
        ],
        "top_ops": [
            {"ms": ms, "op": op, "shapes": shapes, "calls": calls}
            for ms, op, shapes, calls in sorted(ops, reverse=True)[:30]
        ],
        "note": "kernel time summed over streams (the copy stream's overlaps the compute stream's); the profiler adds"
        " some host overhead per launch",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short-tokens", type=int, default=100_000)
    parser.add_argument("--long-tokens", type=int, default=200_000)
    parser.add_argument("--layers", type=int, default=64, help="decoder layers of the 27B-shaped model")
    parser.add_argument("--target", choices=("bf16", "fp8"), default="bf16")
    parser.add_argument("--naive-tokens", type=int, default=0, help="naive over a prefix of each mix (0: all)")
    parser.add_argument("--lean-tokens", type=int, default=0, help="lean over a prefix of each mix (0: all)")
    parser.add_argument("--tuning-sequences", type=int, default=24, help="the untimed first pass's sequences")
    parser.add_argument("--pack-tokens", type=int, default=16384)
    parser.add_argument("--store-in", type=Path, help="where the stores lie (default: the temporary directory)")
    parser.add_argument(
        "--writers", type=int, default=WRITER_THREADS, help="writer threads (more contend for the GIL; the service's)"
    )
    parser.add_argument(
        "--writer-sweep",
        default="8",
        help="other writer thread counts (or writers:write_codec_threads), each run end to end after the main pair",
    )
    parser.add_argument(
        "--e2e-both-layers", default="short", help="mixes run end to end with eager and replayed layers (else default)"
    )
    parser.add_argument("--audit", type=int, default=20)
    parser.add_argument("--compare-tokens", type=int, default=2048)
    parser.add_argument(
        "--mixes",
        default=",".join(MIXES),
        help="the mixes to run (each with its own seed, as in a run of all); one a call fits 1M tokens and its audit "
        "into a device call's 600 s",
    )
    parser.add_argument("--profile-only", action="store_true", help="only profile one pack of each mix")
    parser.add_argument("--gpu-tests-log", type=Path, help="`pytest -rA` output of the gpu tests, to record")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    mixes = {seed: mix for seed, mix in enumerate(MIXES) if mix in args.mixes.split(",")}
    if not mixes:
        parser.error(f"--mixes: one or more of {', '.join(MIXES)}")

    record: dict = {**record_header(), "mixes": list(mixes.values())}
    started = time.perf_counter()
    if args.gpu_tests_log and args.gpu_tests_log.exists():
        outcomes = {}
        for line in args.gpu_tests_log.read_text().splitlines():
            word, _, test = line.partition(" ")
            if word in ("PASSED", "FAILED", "ERROR", "SKIPPED") and "::" in test:
                outcomes[test.split(" ")[0]] = word
        record["gpu_tests"] = outcomes

    def save(complete: bool) -> None:
        """The record so far, written after each mix and profile too: a run cut off by its time limit keeps what it
        measured."""
        record["complete"] = complete
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))

    loaded = build_synthetic("cuda", num_layers=args.layers)
    built = time.perf_counter()
    converted = to_fp8(loaded) if args.target == "fp8" else 0
    record["model"] = {
        "shape": "Qwen3.5-27B",
        "target": args.target,
        "fp8_linear_layers": converted,
        "weights_gb": torch.cuda.memory_allocated() / GB,
        "params_b": sum(p.numel() for p in loaded.model.parameters()) / 1e9,
        "build_s": built - started,
        "fp8_convert_s": time.perf_counter() - built,
    }
    featureset = FeatureSet.default_for(args.layers)
    layers = [int(layer) for layer in featureset.layers]
    record["featureset"] = featureset.canonical()
    print(f"model built: {record['model']}", flush=True)

    store = Path(tempfile.mkdtemp(prefix="hsstore-bench-", dir=args.store_in))
    record["store_in"] = str(args.store_in or tempfile.gettempdir())
    settings = Settings(data_dir=store, device="cuda", writer_threads=args.writers, pack_tokens=args.pack_tokens)
    services = build_services(settings, loaded)
    vocab = int(loaded.config.vocab_size)
    extractor, spec = services.models.extractor(), services.models.spec
    planned = extractor.plan(Backend.FLA).fingerprint  # the fused forwards' probe and the memory plan, untimed
    record["policy"] = planned.batching
    record["heap"] = settings.heap  # the process's C heap as build_services left it (HSSTORE_HEAP)
    record["attention_kernel"] = planned.attention_kernel
    record["elementwise"] = planned.elementwise

    def e2e(
        sequences: list[list[int]],
        subdir: str,
        writers: int = args.writers,
        graphs: bool | None = None,
        codec_threads: int = settings.write_codec_threads,
    ) -> tuple[float, float, dict]:
        """Seconds, peak activations and what else the run saw: GPU idle share and the extracting thread's waits."""
        update = {
            "data_dir": store / subdir,
            "writer_threads": writers,
            "write_codec_threads": codec_threads,
            "cuda_graphs": settings.cuda_graphs,
        }
        if graphs is not None:  # None: the settings' own (auto: this GPU model's default)
            update["cuda_graphs"] = graphs
        run = build_services(settings.model_copy(update=update), loaded)
        run_extractor = run.models.extractor()
        run_extractor.plan(Backend.FLA)  # its one-time probe and memory plan, untimed
        if run.writer.canaries is not None:  # and the canary, once per model load: untimed too
            run.writer.canaries.check(run_extractor, run.models.spec, Backend.FLA)
        request = ExtractRequest(
            samples=[{"token_ids": ids} for ids in sequences], featureset=featureset, backend="fla"
        )
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with Utilization() as utilization:
            t = time.perf_counter()
            response = run.writer.extract(request)
            elapsed = time.perf_counter() - t
        assert response.extracted == len(sequences), response.extracted
        waits = {
            when: run.metrics.registry.get_sample_value("hsstore_extract_write_wait_seconds_total", {"when": when})
            for when in ("between_forwards", "after_last")
        }
        run.close()
        del run, run_extractor
        released()
        return elapsed, peak_since(base), {"gpu_idle_share": utilization.idle_share, "write_wait_s": waits}

    record["cuda_graphs"] = planned.cuda_graphs
    run = extractor.device_run(featureset, Backend.FLA)  # the layer mode this GPU model runs by default, and why
    record["run"] = run.model_dump(mode="json")
    print(f"run: {record['run']}", flush=True)
    # the packs that run: the configured shape, or what the memory plan cut it to on this card
    packs = PackPolicy(run.memory.pack_tokens) if run.memory is not None else extractor.pack_policy
    record["policy"] = packs.describe() if packs is not None else record["policy"]
    replays_default = run.layer_mode is LayerMode.REPLAYED
    default_mode, other_mode = ("replayed", "eager_layers") if replays_default else ("eager_layers", "replayed")
    other_layers = LayerMode.EAGER if replays_default else LayerMode.REPLAYED
    by_mode = {  # the service's extractor runs the default layer mode, a second one the other
        default_mode: extractor,
        other_mode: Extractor(
            loaded, settings.fused_elementwise, args.pack_tokens, graph_recorder(loaded, other_layers), "the other"
        ),
    }
    by_mode[other_mode].plan(Backend.FLA)  # its one-time probe and memory plan, untimed

    def lean(items: list, by: Extractor = extractor) -> float:
        """The forwards and their copies to host memory, each result waited for once the next forward is launched,
        as the service's writer waits (so the host's work for one pack overlaps the GPU's for the one before)."""
        torch.cuda.synchronize()
        t = time.perf_counter()
        waiting: list = []
        for _, pending in by.extract_many(items, featureset, Backend.FLA):
            for earlier in [p for p in waiting if p.forward < pending.forward]:
                earlier.wait()
                waiting.remove(earlier)
            waiting.append(pending)
        for pending in waiting:
            pending.wait()
        return time.perf_counter() - t

    record["audit"] = {}
    for seed, mix in () if args.profile_only else mixes.items():
        low, high = MIXES[mix]
        lengths = lengths_totalling(getattr(args, f"{mix}_tokens"), low, high, seed=10 + seed)
        sequences = random_ids(lengths, vocab, seed=20 + seed)
        total = sum(lengths)
        record[f"{mix}_tokens"], record[f"{mix}_sequences"] = total, len(lengths)
        record[f"{mix}_packs"] = fill(lengths, packs)
        items = [(spec.encode(parse_sample({"token_ids": ids}), 1 << 20), "lean") for ids in sequences]
        # fla's Triton kernels compile and autotune on their first calls (keyed by head shapes, not by length): an
        # untimed pass over sequences of the mix's whole range first, so neither side is charged for tuning
        by_length = sorted(range(len(items)), key=lambda i: lengths[i])
        spread = [items[by_length[i * len(items) // args.tuning_sequences]] for i in range(args.tuning_sequences)]
        record[f"{mix}_tuning_pass_s"] = lean(spread if len(items) > args.tuning_sequences else items)
        # lean first, on a quiet host: the end-to-end run leaves tens of GB of writes behind it
        lean_items = items[: len(prefix(sequences, args.lean_tokens))]
        record[f"{mix}_lean_tokens"] = sum(len(encoded.prompt_ids) for encoded, _ in lean_items)
        lean(lean_items)  # untimed: the first pass over new lengths costs more, whichever mode would run it
        for mode in list(by_mode) if seed == 0 else reversed(by_mode):
            name = f"{mix}_lean_{mode}_tok_s"
            record[name] = record[f"{mix}_lean_tokens"] / lean(lean_items, by_mode[mode])
            print(f"{mix} lean, {mode}: {record[name]:.0f} tok/s", flush=True)
        record[f"{mix}_lean_tok_s"] = record[f"{mix}_lean_{default_mode}_tok_s"]
        record[f"{mix}_lean_replayed_over_eager"] = (
            record[f"{mix}_lean_replayed_tok_s"] / record[f"{mix}_lean_eager_layers_tok_s"]
        )
        by_mode["replayed"].graphs = None  # its recordings' memory pools, before the end-to-end runs record their own
        released()  # (made again at its next pack)
        naive(loaded.model, sequences[:2], layers)
        naive_sequences = prefix(sequences, args.naive_tokens)
        record[f"{mix}_naive_tokens"] = sum(map(len, naive_sequences))
        # side by side, the order swapped between the mixes; the other layer mode's store goes before the default's
        # run (one 1M-token mix stores ~51 GB: two would not fit the device's RAM), the default's stays for the audit
        other = [] if mix not in args.e2e_both_layers.split(",") else ["e2e_other"]
        order = ("naive", *other, "e2e") if seed == 0 else (*other, "e2e", "naive")
        for name in order:
            if name == "naive":
                elapsed, peak = naive(loaded.model, naive_sequences, layers)
                done = record[f"{mix}_naive_tokens"]
            elif name == "e2e_other":
                elapsed, peak, seen = e2e(sequences, f"{mix}-{other_mode}", graphs=other_mode == "replayed")
                shutil.rmtree(store / f"{mix}-{other_mode}", ignore_errors=True)
                record[f"{mix}_e2e_{other_mode}"] = {"tok_s": total / elapsed, "peak_gb": peak, **seen}
                print(f"{mix} e2e, {other_mode}: {record[f'{mix}_e2e_{other_mode}']}", flush=True)
                continue
            else:
                elapsed, peak, seen = e2e(sequences, mix)
                done = total
                record[f"{mix}_e2e_gpu_idle_share"] = seen["gpu_idle_share"]
                record[f"{mix}_e2e_write_wait_s"] = seen["write_wait_s"]
                record[f"{mix}_e2e_mode"] = default_mode
            record[f"{mix}_{name}_tok_s"], record[f"{mix}_{name}_peak_gb"] = done / elapsed, peak
            print(f"{mix} {name}: {done / elapsed:.0f} tok/s over {done} tokens, peak {peak:.2f} GB", flush=True)
        print(
            f"{mix} e2e: GPU idle {record[f'{mix}_e2e_gpu_idle_share']} of the time (nvidia-smi), "
            f"waits on writers {record[f'{mix}_e2e_write_wait_s']}",
            flush=True,
        )
        sweep = record[f"{mix}_e2e_by_writers"] = {}
        for variant in [w for w in args.writer_sweep.split(",") if w]:
            writers, _, codecs = variant.partition(":")
            codec_threads = int(codecs) if codecs else settings.write_codec_threads
            elapsed, _, seen = e2e(sequences, f"{mix}-w{writers}-c{codec_threads}", int(writers), None, codec_threads)
            sweep[variant] = {"tok_s": total / elapsed, **seen}
            print(f"{mix} e2e with {variant} writers(:codec threads): {sweep[variant]}", flush=True)
        record[f"{mix}_e2e_over_lean"] = record[f"{mix}_e2e_tok_s"] / record[f"{mix}_lean_tok_s"]
        save(complete=False)
        # the audit of this mix's entries, then its store goes: a 1M-token mix stores ~51 GB
        audited = build_services(settings.model_copy(update={"data_dir": store / mix}), loaded)
        audit = audited.auditor.audit(args.audit // len(mixes), seed=0)
        record["audit"][mix] = {"total": audit.total, "reproduced": audit.reproduced}
        record["audit"].setdefault("mismatched", []).extend(r.prompt_hash for r in audit.results if not r.reproduced)
        print(
            f"audit {mix}: {audit.reproduced}/{audit.total} reproduced bit for bit (each alone in a pack)", flush=True
        )
        audited.close()
        del audited
        released()
        shutil.rmtree(store / mix, ignore_errors=True)
        record[f"{mix}_speedup"] = record[f"{mix}_e2e_tok_s"] / record[f"{mix}_naive_tok_s"]
        record[f"{mix}_peak_ratio"] = record[f"{mix}_e2e_peak_gb"] / record[f"{mix}_naive_peak_gb"]
        print(
            f"{mix}: e2e/naive {record[f'{mix}_speedup']:.3f}x, lean packed {record[f'{mix}_lean_tok_s']:.0f} tok/s, "
            f"peak {record[f'{mix}_peak_ratio']:.3f}x",
            flush=True,
        )
        save(complete=False)

    profiled = mixes if args.profile_only else dict(list(mixes.items())[:1])
    for seed, mix in profiled.items():
        lengths = lengths_totalling(getattr(args, f"{mix}_tokens"), *MIXES[mix], seed=10 + seed)
        first_pack = plan_packs(lengths, packs)[0] if packs else None
        if first_pack is None:
            break
        ids = random_ids(lengths, vocab, seed=20 + seed)
        pack_items = [
            (spec.encode(parse_sample({"token_ids": ids[s.index]}), 1 << 20), "profile") for s in first_pack.segments
        ]
        if args.profile_only:  # fla tunes its kernels for the pack's shapes on the first pass
            profile_pack(extractor, pack_items, featureset)
        record[f"profile_one_{mix}_pack"] = profile_pack(extractor, pack_items, featureset)
        print(f"profile of one {mix}-mix pack: {json.dumps(record[f'profile_one_{mix}_pack'])}", flush=True)
        save(complete=False)
    if args.profile_only:
        save(complete=True)
        return

    record["audit_total"] = sum(record["audit"][m]["total"] for m in mixes.values())
    record["audit_reproduced"] = sum(record["audit"][m]["reproduced"] for m in mixes.values())

    audited = build_services(settings.model_copy(update={"data_dir": store / "compare"}), loaded)
    compare_ids = random_ids([args.compare_tokens], vocab, seed=3)[0]
    audited.writer.extract(ExtractRequest(samples=[{"token_ids": compare_ids}], featureset=featureset, backend="fla"))
    prompt = parse_sample({"token_ids": compare_ids}).prompt_hash
    record["compare"] = {}
    for other in (Backend.TORCH, Backend.FLA_NOCONV):
        t = time.perf_counter()
        report = audited.auditor.compare(FeatureKey(prompt_hash=prompt), Backend.FLA, other, extract_missing=True)
        record["compare"][f"fla_vs_{other.value}"] = {
            "tokens": report.num_tokens,
            "seconds": time.perf_counter() - t,
            "layers": [row.model_dump() for row in report.layers],
        }
        print(
            f"compare fla vs {other.value}: "
            + ", ".join(
                f"L{r.layer} cos {r.cosine_mean:.5f}/{r.cosine_min:.4f} max|d| {r.max_abs_diff:.3g}"
                for r in report.layers
            ),
            flush=True,
        )
    audited.close()
    shutil.rmtree(store, ignore_errors=True)

    record["total_s"] = time.perf_counter() - started
    save(complete=True)
    keys = [
        f"{m}_{k}"
        for m in mixes.values()
        for k in (
            "e2e_tok_s",
            "naive_tok_s",
            "lean_tok_s",
            "lean_eager_layers_tok_s",
            "lean_replayed_tok_s",
            "e2e_over_lean",
            "speedup",
            "packs",
            "e2e_gpu_idle_share",
        )
    ]
    print(json.dumps({k: record[k] for k in [*keys, "audit_total", "audit_reproduced", "policy"]}))


if __name__ == "__main__":
    main()
