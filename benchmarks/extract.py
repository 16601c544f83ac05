"""Extraction benchmark on one GPU, 27B shape, 5 DFlash layers, side by side in one process:

  naive  HF `model(input_ids, output_hidden_states=True)` (logits included), one sequence at a time, layers picked
         from the tuple: the forward alone, nothing copied or written.
  e2e    the service's extraction path: FeatureWriter.extract over the same sequences (lean forward with the fused
         elementwise forwards once proven bit-equal, optional bit-checked batching, side-stream copy to pinned
         memory, hashing + compression + zarr write + catalog in writer threads).
  lean   the lean forward alone, fused and eager, to show what fusion and the writing pipeline each account for.

Then: a batching calibration (batched vs one-by-one bits on this device), an audit of stored entries, and compare
reports fla vs torch and fla vs fla-noconv. Prints ratios and writes one JSON record.

    python benchmarks/extract.py --tokens 200000 --out benchmarks/results/extract-h200.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from schemas.keys import FeatureKey
from schemas.samples import parse_sample
from service.extraction.extractor import Extractor
from service.main import build_services
from service.model.synthetic import build_synthetic
from service.settings import Settings

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


def peak_since(base: int) -> float:
    return (torch.cuda.max_memory_allocated() - base) / GB


def naive(model: torch.nn.Module, sequences: list[list[int]], layers: list[int]) -> tuple[float, float]:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    with torch.inference_mode():
        for ids in sequences:
            out = model(input_ids=torch.tensor([ids], device="cuda"), output_hidden_states=True, use_cache=False)
            features = torch.stack([out.hidden_states[layer + 1] for layer in layers], dim=2)
            del out, features
    torch.cuda.synchronize()
    return time.perf_counter() - start, peak_since(base)


def calibrate_batching(services, batch_tokens: int) -> dict:
    """Do right-padded causal batches give the same bits as one sequence per forward on this device? (The
    extractor probes this itself and batches only where they do.)"""
    keeps = services.gate.models.extractor().batching_keeps_bits(batch_tokens, Backend.FLA)
    return {"batch_tokens": batch_tokens, "keeps_bits": keeps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--min-len", type=int, default=256)
    parser.add_argument("--max-len", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=64, help="decoder layers of the 27B-shaped model")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--writers", type=int, default=4, help="writer threads (more contend for the GIL)")
    parser.add_argument("--audit", type=int, default=20)
    parser.add_argument("--compare-tokens", type=int, default=2048)
    parser.add_argument("--gpu-tests-log", type=Path, help="`pytest -rA` output of the gpu tests, to record")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    record: dict = {
        **record_header(),
    }
    started = time.perf_counter()
    loaded = build_synthetic("cuda", num_layers=args.layers)
    weights_gb = torch.cuda.memory_allocated() / GB
    record["model"] = {
        "shape": "Qwen3.5-27B",
        "layers": args.layers,
        "weights_gb": weights_gb,
        "params_b": sum(p.numel() for p in loaded.model.parameters()) / 1e9,
        "build_s": time.perf_counter() - started,
    }
    featureset = FeatureSet.default_for(64) if args.layers == 64 else FeatureSet.default_for(args.layers)
    layers = [int(layer) for layer in featureset.layers]
    record["featureset"] = featureset.canonical()
    print(f"model built: {record['model']}", flush=True)

    store = Path(tempfile.mkdtemp(prefix="hsstore-bench-"))
    settings = Settings(data_dir=store, device="cuda", writer_threads=args.writers, batch_tokens=0)
    services = build_services(settings, loaded)
    vocab = int(loaded.config.vocab_size)

    # Warm-up: fla's Triton kernels JIT-compile on first use (~45 s), cuBLAS picks its algorithms.
    warm = random_ids([512, 700], vocab, seed=99)
    t0 = time.perf_counter()
    naive(loaded.model, warm, layers)
    services.writer.extract(
        ExtractRequest(samples=[{"token_ids": ids} for ids in warm], featureset=featureset, backend="fla")
    )
    record["warmup_s"] = time.perf_counter() - t0
    print(f"warm-up {record['warmup_s']:.1f}s", flush=True)

    record["batching_calibration"] = calibrate_batching(services, args.batch_tokens)
    batching_safe = record["batching_calibration"]["keeps_bits"]
    print(f"batching calibration: {record['batching_calibration']}", flush=True)

    lengths = lengths_totalling(args.tokens, args.min_len, args.max_len, seed=0)
    sequences = random_ids(lengths, vocab, seed=1)
    total = sum(lengths)
    record["tokens"] = total
    record["sequences"] = len(lengths)

    # fla's Triton kernels autotune per sequence length: one untimed pass over every length first, so neither side
    # is charged for tuning (a cold cache otherwise lands on whichever side sees a length first).
    extractor, spec = services.gate.models.extractor(), services.gate.models.spec
    items = [(spec.encode(parse_sample({"token_ids": ids}), 1 << 20), "lean") for ids in sequences]
    t = time.perf_counter()
    for _, pending in extractor.extract_many(items, featureset, Backend.FLA, 0):
        pending.wait()
    record["tuning_pass_s"] = time.perf_counter() - t

    naive_s, naive_peak = naive(loaded.model, sequences, layers)
    record["naive_tok_s"] = total / naive_s
    record["naive_peak_gb"] = naive_peak
    print(f"naive: {record['naive_tok_s']:.0f} tok/s, peak activations {naive_peak:.2f} GB", flush=True)

    def e2e(batch_tokens: int, subdir: str) -> tuple[float, float]:
        update = {"data_dir": store / subdir, "batch_tokens": batch_tokens}
        run_settings = settings.model_copy(update=update)
        run = build_services(run_settings, loaded)
        # A new object graph has a new extractor, whose one-time probes (fusion: ~0.5 s here) run at its first use; they
        # run here, untimed, as the naive side's warm-up does, so the timing is the extraction path's throughput.
        run.gate.models.extractor().fusion_keeps_bits(Backend.FLA)
        request = ExtractRequest(
            samples=[{"token_ids": ids} for ids in sequences], featureset=featureset, backend="fla"
        )
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t = time.perf_counter()
        response = run.writer.extract(request)
        elapsed = time.perf_counter() - t
        assert response.extracted == len(sequences), response.extracted
        run.close()
        return elapsed, peak_since(base)

    # The lean forward alone (no hash or write), fused and eager, to show what fusion and the writing pipeline cost.
    record["elementwise"] = extractor.fingerprint(Backend.FLA, 0, extractor.fusion_keeps_bits(Backend.FLA)).elementwise
    for name, lean in (("lean_forward_tok_s", extractor), ("lean_forward_eager_tok_s", Extractor(loaded, fuse=False))):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _, pending in lean.extract_many(items, featureset, Backend.FLA, 0):
            pending.wait()
        record[name] = total / (time.perf_counter() - t)
        print(f"{name}: {record[name]:.0f} tok/s", flush=True)

    single_s, single_peak = e2e(0, "e2e-single")
    record["e2e_single_tok_s"] = total / single_s
    record["e2e_single_peak_gb"] = single_peak
    print(f"e2e one sequence per forward: {total / single_s:.0f} tok/s, peak {single_peak:.2f} GB", flush=True)
    # The same path once more, its store thrown away: the spread between the two is the run-to-run noise.
    repeat_s, _ = e2e(0, "e2e-repeat")
    shutil.rmtree(store / "e2e-repeat", ignore_errors=True)
    record["e2e_repeat_tok_s"] = total / repeat_s
    print(f"e2e one sequence per forward, repeated: {total / repeat_s:.0f} tok/s", flush=True)
    if batching_safe:
        batched_s, batched_peak = e2e(args.batch_tokens, "e2e-batched")
        record["e2e_batched_tok_s"] = total / batched_s
        record["e2e_batched_peak_gb"] = batched_peak
        print(f"e2e batched: {total / batched_s:.0f} tok/s, peak {batched_peak:.2f} GB", flush=True)
    # The service's policy on this device: batching only where the calibration showed identical bits.
    best = "batched" if batching_safe and record["e2e_batched_tok_s"] > record["e2e_single_tok_s"] else "single"
    record["e2e_policy"] = best
    record["e2e_tok_s"] = record[f"e2e_{best}_tok_s"]
    record["e2e_peak_gb"] = record[f"e2e_{best}_peak_gb"]
    record["speedup"] = record["e2e_tok_s"] / record["naive_tok_s"]
    record["peak_ratio"] = record["e2e_peak_gb"] / record["naive_peak_gb"]
    store_bytes = sum(p.stat().st_size for p in (store / f"e2e-{best}" / "blobs").rglob("*") if p.is_file())
    record["stored_bytes_per_token"] = store_bytes / total
    record["raw_bytes_per_token"] = len(layers) * int(loaded.config.hidden_size) * 2 + 4
    print(f"e2e/naive tokens/s: {record['speedup']:.3f}x; peak activations {record['peak_ratio']:.3f}x", flush=True)

    audited = build_services(settings.model_copy(update={"data_dir": store / f"e2e-{best}"}), loaded)
    audit = audited.auditor.audit(args.audit, seed=0)
    record["audit_total"] = audit.total
    record["audit_reproduced"] = audit.reproduced
    record["audit_mismatched"] = [r.prompt_hash for r in audit.results if not r.reproduced]
    print(f"audit: {audit.reproduced}/{audit.total} reproduced bit for bit", flush=True)

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
                f"L{row.layer} cos {row.cosine_mean:.5f}/{row.cosine_min:.4f} max|d| {row.max_abs_diff:.3g} "
                f"eq {row.bitwise_equal_fraction:.3f}"
                for row in report.layers
            ),
            flush=True,
        )
    audited.close()
    shutil.rmtree(store, ignore_errors=True)

    if args.gpu_tests_log and args.gpu_tests_log.exists():
        outcomes = {}
        for line in args.gpu_tests_log.read_text().splitlines():
            word, _, test = line.partition(" ")
            if word in ("PASSED", "FAILED", "ERROR", "SKIPPED") and "::" in test:
                outcomes[test.split(" ")[0]] = word
        record["gpu_tests"] = outcomes
    record["total_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    print(
        json.dumps(
            {
                k: record[k]
                for k in (
                    "e2e_tok_s",
                    "naive_tok_s",
                    "speedup",
                    "e2e_peak_gb",
                    "naive_peak_gb",
                    "peak_ratio",
                    "audit_total",
                    "audit_reproduced",
                )
            }
        )
    )


if __name__ == "__main__":
    main()
