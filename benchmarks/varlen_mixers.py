"""The Gated-DeltaNet token mixers over an own-rows pack at the 27B's linear-attention shape (16 key heads, 48 value
heads, head dims 128, conv width 4 over 10,240 channels): fla's gated delta rule and causal-conv1d, each once per
sequence on its rows laid out as alone (what a pack ran) against once over the pack through the kernel's varlen form
(fla's `cu_seqlens`, causal-conv1d's `seq_idx`), every sequence and stretch of filler its own. Per pack, for packs of
both length mixes: whether every sequence's output bits are its own call's, and milliseconds per call of each way,
side by side (synchronised, so launches count where the host sets the pace; the pack profile in extract.py says what
the GPU spends).

    python benchmarks/varlen_mixers.py --out benchmarks/results/varlen-mixers-h200.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from benchmarks.timing import gpu_ms_per_call
from schemas.batching import PackPolicy
from service.extraction.own_rows import alone
from service.extraction.packing import Pack, plan_packs

KEY_HEADS, VALUE_HEADS, HEAD_DIM = 16, 48, 128
CHANNELS = (2 * KEY_HEADS + VALUE_HEADS) * HEAD_DIM
MIXES = {"short": (128, 2048), "long": (256, 8192)}


def same_bits(packed: torch.Tensor, parts: list[torch.Tensor], spans: list[tuple[int, int]], axis: int) -> bool:
    return all(
        torch.equal(packed.narrow(axis, s, e - s).view(torch.int16), part.view(torch.int16))
        for (s, e), part in zip(spans, parts, strict=True)
    )


def measure(pack: Pack, device: torch.device) -> dict:
    """One pack's mixers both ways: the same bits? and milliseconds per call of each way."""
    from causal_conv1d import causal_conv1d_fn
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    tokens, spans = pack.shape, [(s.start, s.start + s.length) for s in pack.segments]
    generator = torch.Generator(device=device).manual_seed(tokens + len(spans))
    mixed = F.silu(torch.randn(1, tokens, CHANNELS, device=device, generator=generator)).bfloat16()
    q, k, v = torch.split(mixed, [KEY_HEADS * HEAD_DIM, KEY_HEADS * HEAD_DIM, VALUE_HEADS * HEAD_DIM], -1)
    q, k = (t.reshape(1, tokens, KEY_HEADS, HEAD_DIM) for t in (q, k))
    v = v.reshape(1, tokens, VALUE_HEADS, HEAD_DIM)
    a = torch.randn(1, tokens, VALUE_HEADS, device=device, generator=generator)
    g = -torch.rand(VALUE_HEADS, device=device, generator=generator).exp() * F.softplus(a + 0.5)
    beta = torch.rand(1, tokens, VALUE_HEADS, device=device, generator=generator).bfloat16()
    edges = sorted({0, tokens, *(edge for span in spans for edge in span)})
    cpu = torch.tensor(edges, dtype=torch.long)
    cu_seqlens = cpu.to(device)
    seq_idx = torch.repeat_interleave(torch.arange(len(edges) - 1, dtype=torch.int32), cpu.diff())[None].to(device)
    kw = {"initial_state": None, "output_final_state": False, "use_qk_l2norm_in_kernel": True}
    x = mixed.transpose(1, 2)  # [1, C, T], channel-last, as the layer hands it over
    weight = torch.randn(CHANNELS, 4, device=device, generator=generator).bfloat16()
    bias = torch.randn(CHANNELS, device=device, generator=generator).bfloat16()

    def part(t: torch.Tensor, axis: int, s: int, e: int) -> torch.Tensor:
        return alone(t.narrow(axis, s, e - s), axis, tokens)

    def rule_over_pack() -> torch.Tensor:
        return chunk_gated_delta_rule(q, k, v, g=g, beta=beta, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cpu, **kw)[0]

    def rule_each() -> list[torch.Tensor]:
        return [
            chunk_gated_delta_rule(
                part(q, 1, s, e), part(k, 1, s, e), part(v, 1, s, e), g=part(g, 1, s, e), beta=part(beta, 1, s, e),
                **kw,
            )[0]
            for s, e in spans
        ]  # fmt: skip

    def conv_over_pack() -> torch.Tensor:
        return causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation="silu")

    def conv_each() -> list[torch.Tensor]:
        return [causal_conv1d_fn(part(x, 2, s, e), weight, bias, activation="silu") for s, e in spans]

    return {
        "lengths": [e - s for s, e in spans],
        "rule_same_bits": same_bits(rule_over_pack(), rule_each(), spans, 1),
        "rule_each_ms": gpu_ms_per_call(rule_each),
        "rule_over_pack_ms": gpu_ms_per_call(rule_over_pack),
        "conv_same_bits": same_bits(conv_over_pack(), conv_each(), spans, 2),
        "conv_each_ms": gpu_ms_per_call(conv_each),
        "conv_over_pack_ms": gpu_ms_per_call(conv_over_pack),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packs", type=int, default=3, help="packs per mix")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    record: dict = {**record_header(), "packs": []}
    rng = random.Random(0)
    with torch.inference_mode():
        for mix, (low, high) in MIXES.items():
            lengths = [rng.randint(low, high) for _ in range(60)]
            for pack in plan_packs(lengths, PackPolicy(16384))[: args.packs]:
                row = {"mix": mix, **measure(pack, torch.device("cuda"))}
                record["packs"].append(row)
                print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
