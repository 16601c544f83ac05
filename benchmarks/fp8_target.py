"""The FP8 target against the bfloat16 one, in one process on one GPU: the 27B-shaped random model extracted as it
is, then quantized in place as Qwen's `-FP8` releases are (e4m3 weights, 128 x 128 block scales; its bfloat16
weights go as each layer is converted, so the two are measured one after the other, not interleaved), then
extracted again. Per target and length mix (the packing benchmark's: short 128-2048 tokens, long 256-8192):

  lean   the packed lean forward alone (what extraction runs; no hash or write)
  e2e    the service's extraction path, FeatureWriter.extract into a store

then an audit of stored entries of each target (re-extracted alone in a pack, bit for bit), and per layer the cosine
and max |diff| of the FP8 target's features against the bfloat16 target's for the same sequences. The fingerprint of
each says which GEMM ran (`fp8_gemm`).

    python benchmarks/fp8_target.py --out benchmarks/results/fp8-vs-bf16-h200.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.extract import MIXES, lengths_totalling, random_ids
from benchmarks.records import record_header
from benchmarks.timing import gpu_ms_per_call
from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from schemas.manifest import HIDDEN_STATES
from schemas.samples import parse_sample
from service.main import build_services
from service.model.synthetic import QWEN3_5_27B, build_synthetic, to_fp8
from service.settings import Settings

GB = 1e9


def measure(
    loaded, settings: Settings, featureset: FeatureSet, backend: Backend, mixes: dict, compare: list, audit: int
) -> dict:
    """Lean and end-to-end tok/s per mix, the audit, the fingerprint, and the features of `compare` (on the CPU)."""
    services = build_services(settings, loaded)
    extractor, spec = services.models.extractor(), services.models.spec
    planned = extractor.plan(backend)  # its one-time probe and memory plan, untimed
    if services.writer.canaries is not None:  # and the canary, once per model load: untimed too
        services.writer.canaries.check(extractor, spec, backend)
    figures: dict = {"elementwise": planned.fingerprint.elementwise}

    def lean(items: list) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _, pending in extractor.extract_many(items, featureset, backend):
            pending.wait()
        return time.perf_counter() - t

    for mix, sequences in mixes.items():
        total = sum(map(len, sequences))
        items = [(spec.encode(parse_sample({"token_ids": ids}), 1 << 20), mix) for ids in sequences]
        figures[f"{mix}_tuning_pass_s"] = lean(items)  # fla tunes its kernels per shape on a first pass
        figures[f"{mix}_lean_tok_s"] = total / lean(items)
        request = ExtractRequest(
            samples=[{"token_ids": ids} for ids in sequences], featureset=featureset, backend=backend.value
        )
        t = time.perf_counter()
        response = services.writer.extract(request)
        figures[f"{mix}_e2e_tok_s"] = total / (time.perf_counter() - t)
        assert response.extracted == len(sequences), response.extracted
        figures.setdefault("fingerprint", response.results[0].manifest.fingerprint.model_dump(exclude_none=True))
        print(
            f"  {mix}: lean {figures[f'{mix}_lean_tok_s']:.0f} tok/s, e2e {figures[f'{mix}_e2e_tok_s']:.0f}", flush=True
        )
    report = services.auditor.audit(audit, seed=0)
    figures["audit"] = {"total": report.total, "reproduced": report.reproduced}
    print(f"  audit: {report.reproduced}/{report.total} reproduced bit for bit", flush=True)
    items = [(spec.encode(parse_sample({"token_ids": ids}), 1 << 20), "compare") for ids in compare]
    features = {}
    for index, pending in extractor.extract_many(items, featureset, backend):
        tensors = {t.name: to_torch(t) for t in pending.wait().tensors}
        features[index] = tensors[HIDDEN_STATES].float()
    services.close()
    return {"figures": figures, "features": features}


def gemm_time(tokens: int, n: int, k: int) -> dict:
    """One linear layer shape (out, in) at one pack's tokens: ms of the bfloat16 GEMM, of the FP8 layer's forward
    (activation quantization + block-scaled GEMM), and of that GEMM alone."""
    from torch.nn.functional import linear

    from service.model.fp8_activations import _row_quantizer, quantize_rows
    from service.model.fp8_weights import Fp8Linear, quantize_weight

    x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    layer = Fp8Linear(*quantize_weight(weight, (128, 128)), (128, 128))
    quantized, scales = _row_quantizer()(x, tokens)
    with torch.inference_mode():
        row = {
            "shape": [tokens, n, k],
            "bf16_ms": gpu_ms_per_call(lambda: linear(x, weight)),
            "fp8_layer_ms": gpu_ms_per_call(lambda: layer(x)),
            "quantize_one_pass_ms": gpu_ms_per_call(lambda: _row_quantizer()(x, tokens)),
            "quantize_torch_chain_ms": gpu_ms_per_call(lambda: quantize_rows(x, tokens)),
            "fp8_gemm_alone_ms": gpu_ms_per_call(lambda: layer.scaled_mm(quantized, scales, torch.bfloat16)),
        }
    row["fp8_layer_over_bf16"] = row["bf16_ms"] / row["fp8_layer_ms"]
    return row


def layer_agreement(reference: dict, other: dict, layers: list[int]) -> list[dict]:
    """Per captured layer, over every token of the compared sequences: cosine (mean, min) and max |diff|."""
    rows = []
    for position, layer in enumerate(layers):
        a = torch.cat([reference[i][:, position] for i in sorted(reference)])
        b = torch.cat([other[i][:, position] for i in sorted(reference)])
        cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)
        rows.append(
            {
                "layer": layer,
                "cosine_mean": cosine.mean().item(),
                "cosine_min": cosine.min().item(),
                "max_abs_diff": (a - b).abs().max().item(),
                "max_abs_reference": a.abs().max().item(),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short-tokens", type=int, default=50_000)
    parser.add_argument("--long-tokens", type=int, default=80_000)
    parser.add_argument("--layers", type=int, default=64, help="decoder layers of the 27B-shaped model")
    parser.add_argument("--pack-tokens", type=int, default=16384)
    parser.add_argument("--audit", type=int, default=6)
    parser.add_argument("--compare", type=int, default=4, help="short-mix sequences compared layer by layer")
    parser.add_argument("--backend", type=Backend, default=Backend.FLA)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    record: dict = {**record_header()}
    started = time.perf_counter()
    loaded = build_synthetic("cuda", num_layers=args.layers)
    featureset = FeatureSet.default_for(args.layers)
    layers = [int(layer) for layer in featureset.layers]
    vocab = int(loaded.config.vocab_size)
    mixes = {}
    for seed, (mix, (low, high)) in enumerate(MIXES.items()):
        lengths = lengths_totalling(getattr(args, f"{mix}_tokens"), low, high, seed=10 + seed)
        mixes[mix] = random_ids(lengths, vocab, seed=20 + seed)
        record[f"{mix}_tokens"], record[f"{mix}_sequences"] = sum(lengths), len(lengths)
    compare = mixes["short"][: args.compare]
    record["featureset"] = featureset.canonical()
    record["compared_tokens"] = sum(map(len, compare))
    store = Path(tempfile.mkdtemp(prefix="hsstore-fp8-"))
    settings = Settings(data_dir=store / "bf16", device="cuda", pack_tokens=args.pack_tokens)

    record["bf16_weights_gb"] = torch.cuda.memory_allocated() / GB
    shape = QWEN3_5_27B
    linears = {
        "mlp.gate_proj": (shape["intermediate_size"], shape["hidden_size"]),
        "mlp.down_proj": (shape["hidden_size"], shape["intermediate_size"]),
        "linear_attn.in_proj_qkv": (10240, shape["hidden_size"]),
        "self_attn.q_proj": (12288, shape["hidden_size"]),
    }
    record["gemm_one_pack"] = {name: gemm_time(args.pack_tokens, n, k) for name, (n, k) in linears.items()}
    print(f"GEMMs of one pack: {json.dumps(record['gemm_one_pack'])}", flush=True)
    print("bfloat16 target", flush=True)
    bf16 = measure(loaded, settings, featureset, args.backend, mixes, compare, args.audit)

    t = time.perf_counter()
    record["converted_layers"] = to_fp8(loaded)
    torch.cuda.synchronize()
    record["quantize_s"] = time.perf_counter() - t
    record["fp8_weights_gb"] = torch.cuda.memory_allocated() / GB
    print(f"FP8 target ({record['converted_layers']} layers converted in {record['quantize_s']:.1f} s)", flush=True)
    fp8_settings = settings.model_copy(update={"data_dir": store / "fp8"})
    fp8 = measure(loaded, fp8_settings, featureset, args.backend, mixes, compare, args.audit)
    shutil.rmtree(store, ignore_errors=True)

    record["bf16"], record["fp8"] = bf16["figures"], fp8["figures"]
    for mix in MIXES:
        for path in ("lean", "e2e"):
            record[f"{mix}_{path}_fp8_over_bf16"] = (
                fp8["figures"][f"{mix}_{path}_tok_s"] / bf16["figures"][f"{mix}_{path}_tok_s"]
            )
    record["fp8_vs_bf16_features"] = layer_agreement(bf16["features"], fp8["features"], layers)
    record["total_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    for row in record["fp8_vs_bf16_features"]:
        print(
            f"L{row['layer']}: cos {row['cosine_mean']:.5f} (min {row['cosine_min']:.4f}), max|d| "
            f"{row['max_abs_diff']:.3g} of values up to {row['max_abs_reference']:.3g}",
            flush=True,
        )
    print(json.dumps({k: v for k, v in record.items() if k.endswith("_over_bf16")}))


if __name__ == "__main__":
    main()
