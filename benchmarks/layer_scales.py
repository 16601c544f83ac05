"""How the residual stream's scale grows with depth, per layer (std and absmax over a sequence's values), on the
27B-shaped target (random weights, all its layers) and the tiny test model: what the content checks' layer-to-layer
thresholds must let through (service/core/write/content_checks.py). The torch backend (no kernel to compile).

    python benchmarks/layer_scales.py --out benchmarks/results/layer-scales-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from compute.forward import ForwardPlan
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.model.devmodel import build_devmodel
from service.model.kernels import KernelSet
from service.model.synthetic import build_synthetic


def scales(model: torch.nn.Module, device: str, tokens: int, vocab: int) -> list[dict]:
    body = model.model
    layers = list(range(len(body.layers)))
    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.inference_mode(), KernelSet.for_model(model).running(Backend.TORCH):
        hidden, _ = ForwardPlan.of(FeatureSet(layers=layers), len(body.layers)).capture(body, ids)
    values = hidden[0].float()
    return [
        {"layer": layer, "std": float(values[:, i].std()), "absmax": float(values[:, i].abs().max())}
        for i, layer in enumerate(layers)
    ]


def steps(rows: list[dict], every: int) -> dict:
    """The largest growth and shrink of std between layers `every` apart (DFlash's are 15 apart at 64 layers)."""
    ratios = [rows[i + every]["std"] / rows[i]["std"] for i in range(len(rows) - every)]
    return {"every": every, "max_growth": max(ratios), "max_shrink": 1 / min(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    record: dict = {**record_header()}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        loaded = build_synthetic(device, num_layers=64)
        rows = scales(loaded.model, device, args.tokens, int(loaded.config.vocab_size))
        record["27b_shape"] = {"layers": rows, "steps": [steps(rows, k) for k in (1, 4, 15)]}
        del loaded
        torch.cuda.empty_cache()
    from transformers import AutoModelForCausalLM

    tiny_dir = build_devmodel(Path(tempfile.mkdtemp()) / "tiny")
    tiny = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16).to(device).eval()
    rows = scales(tiny, device, min(args.tokens, 512), int(tiny.config.vocab_size))
    record["tiny"] = {"layers": rows, "steps": [steps(rows, k) for k in (1, 2, 4)]}
    print(json.dumps({k: record[k]["steps"] for k in ("27b_shape", "tiny") if k in record}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
