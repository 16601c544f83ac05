"""What a new sequence length costs torch's scaled-dot-product attention at the 27B's full-attention shape (24 query
heads, 4 key/value heads, head dim 256, causal): per call, for lengths never seen before in this process against the
same lengths again, under the backend torch picks by default and under FlashAttention forced. A backend that builds
an execution plan per shape (cuDNN's) pays the build on each new length.

    python benchmarks/sdpa_lengths.py --out benchmarks/results/sdpa-lengths-h200.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header


def per_call_ms(lengths: list[int], backends: list[SDPBackend] | None) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for n in lengths:
        q = torch.randn(1, 24, n, 256, device="cuda", dtype=torch.bfloat16)
        kv = torch.randn(1, 4, n, 256, device="cuda", dtype=torch.bfloat16).repeat_interleave(6, dim=1)
        if backends is None:
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True)
        else:
            with sdpa_kernel(backends):
                F.scaled_dot_product_attention(q, kv, kv, is_causal=True)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / len(lengths) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    record: dict = {**record_header(), "cudnn": torch.backends.cudnn.version()}
    rng = random.Random(0)
    pool = rng.sample(range(128, 2049), 3 * args.lengths)
    chosen = {"default": None, "flash": [SDPBackend.FLASH_ATTENTION], "cudnn": [SDPBackend.CUDNN_ATTENTION]}
    per_call_ms([512], None)  # library start-up, untimed
    per_call_ms([512], chosen["flash"])
    for index, (name, backends) in enumerate(chosen.items()):
        fresh = pool[index * args.lengths : (index + 1) * args.lengths]  # lengths no backend has seen yet
        record[name] = {"new_lengths_ms": per_call_ms(fresh, backends), "seen_lengths_ms": per_call_ms(fresh, backends)}
        print(name, record[name], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
