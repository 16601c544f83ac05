"""What the fp8 and top-k featuresets cost and keep, on the 27B-shaped target on one GPU, side by side in one run.

The same sequences are extracted through the service's writer (lean forward, hashing, compression, zarr, catalog) as
three featuresets of the same layers, round by round, interleaved:

  bf16   the layers as the model computes them
  fp8    float8 e4m3 with a float32 scale per token and layer (`compute/fp8.py`)
  top64  bf16 layers plus the target's top-64 next-token log-probabilities and retained mass (and target_ids)

Then, from the stored entries: fp8's fidelity against bf16 per layer (cosine per token: mean and min; max |delta|;
max |delta| relative to its row's absmax), raw and stored bytes of each, and the top-k's retained mass and its
agreement with a full-vocabulary log-softmax. Writes one JSON record.

    python benchmarks/featuresets.py --tokens 60000 --out benchmarks/results/featuresets-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.extract import lengths_totalling, random_ids
from benchmarks.records import record_header
from compute.fp8 import dequantise, quantise
from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter
from schemas.samples import parse_sample
from service.main import build_services
from service.model.synthetic import build_synthetic
from service.settings import Settings

LAYERS = [1, 16, 31, 46, 61, 63]  # DFlash's five for 64 layers, and the last (speculators' "final layer")


def featuresets(top_k: int) -> dict[str, FeatureSet]:
    return {
        "bf16": FeatureSet(layers=LAYERS),
        "fp8": FeatureSet(layers=LAYERS, dtype="float8_e4m3fn"),
        f"top{top_k}": FeatureSet(layers=LAYERS, target_ids=True, top_k=top_k),
    }


def fidelity(exact: torch.Tensor, approx: torch.Tensor) -> list[dict]:
    """Per layer of [T, L, H] float32 pairs."""
    rows = []
    for position, layer in enumerate(LAYERS):
        x, y = exact[:, position], approx[:, position]
        cosine = torch.nn.functional.cosine_similarity(x, y, dim=-1, eps=1e-30)
        delta = (x - y).abs()
        rows.append(
            {
                "layer": layer,
                "cosine_mean": float(cosine.mean()),
                "cosine_min": float(cosine.min()),
                "max_abs_diff": float(delta.max()),
                "max_rel_to_row_absmax": float((delta.amax(-1) / x.abs().amax(-1).clamp_min(1e-30)).max()),
                "absmax": float(x.abs().max()),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=60_000)
    parser.add_argument("--min-len", type=int, default=512)
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--top-k", type=int, default=64)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the stores go (default: a temp dir)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    record: dict = {
        **record_header(),
        "model": "Qwen3.5-27B shape, random weights (GPU.md's recipe), 64 layers, bf16",
        "layers": LAYERS,
    }
    loaded = build_synthetic("cuda", num_layers=64)
    vocab = int(loaded.config.vocab_size)
    store = Path(tempfile.mkdtemp(prefix="hsstore-featuresets-", dir=args.work_dir))
    services = build_services(Settings(data_dir=store, device="cuda"), loaded)
    sets = featuresets(args.top_k)
    record["featuresets"] = {name: fs.canonical() for name, fs in sets.items()}

    def extract(sequences: list[list[int]], featureset: FeatureSet) -> float:
        request = ExtractRequest(samples=[{"token_ids": ids} for ids in sequences], featureset=featureset)
        torch.cuda.synchronize()
        start = time.perf_counter()
        services.writer.extract(request)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    t0 = time.perf_counter()
    for featureset in sets.values():  # fla's JIT, cuBLAS and the fusion probe, untimed
        extract(random_ids([384, 700], vocab, seed=99), featureset)
    record["warmup_s"] = time.perf_counter() - t0
    print(f"warm-up {record['warmup_s']:.1f}s", flush=True)

    timings: dict[str, list[float]] = {name: [] for name in sets}
    all_sequences: list[list[int]] = []
    for round_ in range(args.rounds):
        lengths = lengths_totalling(args.tokens // args.rounds, args.min_len, args.max_len, round_)
        sequences = random_ids(lengths, vocab, 10 + round_)
        all_sequences += sequences
        tokens = sum(map(len, sequences))
        order = list(sets) if round_ % 2 == 0 else list(reversed(sets))
        for name in order:
            seconds = extract(sequences, sets[name])
            timings[name].append(tokens / seconds)
            print(f"round {round_} {name}: {tokens / seconds:,.0f} tok/s", flush=True)
    record["tokens"] = sum(map(len, all_sequences))
    record["sequences"] = len(all_sequences)
    record["tok_s"] = {name: sum(v) / len(v) for name, v in timings.items()}
    record["tok_s_rounds"] = timings
    base = record["tok_s"]["bf16"]
    record["tok_s_vs_bf16"] = {name: rate / base for name, rate in record["tok_s"].items()}

    # fidelity and bytes, from the stored entries (read back as readers get them)
    reader, store_ = services.reader, services.store
    exact_all, approx_all = [], []
    sizes = {name: {"raw": 0, "stored": 0} for name in sets}
    masses, top1_agrees, rows, same_bits = [], 0, 0, True
    for ids in all_sequences:
        prompt_hash = parse_sample({"token_ids": ids}).prompt_hash
        served = {}
        for name, featureset in sets.items():
            (manifest,) = services.versions.find(
                EntryFilter(prompt_hash=prompt_hash, featureset_id=featureset.id), limit=2
            )
            served[name] = reader.read(manifest).tensors
            sizes[name]["raw"] += sum(t.nbytes for t in served[name].values())
            sizes[name]["stored"] += store_.stored_bytes(manifest.content_hash)
        exact = to_torch(served["bf16"]["hidden_states"])
        stored_q, stored_scales = to_torch(served["fp8"]["hidden_states"]), to_torch(served["fp8"]["hidden_scales"])
        exact_all.append(exact.float())
        approx_all.append(dequantise(stored_q, stored_scales, torch.float32))
        cpu_q, cpu_scales = quantise(exact)  # the same convention on the CPU gives the device's bits
        same_bits &= torch.equal(cpu_q.view(torch.uint8), stored_q.view(torch.uint8))
        same_bits &= torch.equal(cpu_scales, stored_scales)
        top = served[f"top{args.top_k}"]
        masses.append(to_torch(top["topk_mass"]).clone())
        top1_agrees += int((to_torch(top["topk_ids"])[:, 0] == to_torch(top["target_ids"])).sum())
        rows += len(ids)
    record["fp8_fidelity"] = fidelity(torch.cat(exact_all), torch.cat(approx_all))
    record["fp8_bits_equal_cpu_quantisation_of_bf16_entry"] = same_bits
    record["bytes"] = {
        name: {**s, "per_token_raw": s["raw"] / record["tokens"], "per_token_stored": s["stored"] / record["tokens"]}
        for name, s in sizes.items()
    }
    record["fp8_stored_vs_bf16"] = sizes["fp8"]["stored"] / sizes["bf16"]["stored"]
    record["fp8_raw_vs_bf16"] = sizes["fp8"]["raw"] / sizes["bf16"]["raw"]
    record["compression_ratio"] = {name: s["raw"] / s["stored"] for name, s in sizes.items()}
    mass = torch.cat(masses)
    record["top_k"] = {
        "k": args.top_k,
        "retained_mass": {
            "mean": float(mass.mean()),
            "min": float(mass.min()),
            "median": float(mass.median()),
            "max": float(mass.max()),
        },
        "top1_equals_target_ids": top1_agrees / rows,
    }

    # the stored log-probabilities against the full-vocabulary log-softmax of one sequence, computed here whole
    ids = all_sequences[0][:1024]
    featureset = sets[f"top{args.top_k}"]
    extract([ids], featureset)
    prompt_hash = parse_sample({"token_ids": ids}).prompt_hash
    (manifest,) = services.versions.find(EntryFilter(prompt_hash=prompt_hash, featureset_id=featureset.id), limit=2)
    stored = reader.read(manifest).tensors
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([ids], device=loaded.device), use_cache=False).logits[0].float()
        reference = torch.log_softmax(logits, dim=-1).cpu()
    top_ids = to_torch(stored["topk_ids"]).long()
    record["top_k"]["max_abs_diff_vs_full_log_softmax"] = float(
        (reference.gather(-1, top_ids) - to_torch(stored["topk_logprobs"])).abs().max()
    )
    # bf16 logits tie often (near-flat distributions of random weights most of all), so which of equal tokens are
    # kept may differ from a topk over the whole tensor: what must hold is that no token left out is more likely
    left_out = reference.scatter(-1, top_ids, float("-inf")).amax(dim=-1)
    kept_min = to_torch(stored["topk_logprobs"]).amin(dim=-1)
    record["top_k"]["tokens_where_a_left_out_token_is_more_likely"] = int((left_out > kept_min + 1e-6).sum())

    print(json.dumps({k: v for k, v in record.items() if k not in ("fp8_fidelity",)}, indent=1))
    for row in record["fp8_fidelity"]:
        print(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
