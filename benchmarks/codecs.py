"""Which codec for stored hidden states: every candidate timed on real bf16 hidden states of the 27B-shaped target
(5 DFlash layers, from the lean forward on the GPU machine; not random noise), chunked as the store chunks them
(256 tokens x 1 layer x 5120), one thread each, side by side in one run. Prints a table and writes one JSON record:
per codec the compression ratio and encode / decode GB/s per thread (of raw bytes).

    python benchmarks/codecs.py --tokens 4096 --out benchmarks/results/codecs-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from numcodecs import Blosc, blosc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.records import cpu_model
from benchmarks.timing import timed
from compute.forward import ForwardPlan
from schemas.chunks import blocks
from schemas.featureset import FeatureSet
from service.model.synthetic import build_synthetic

GB = 1e9
SHUFFLES = {"none": Blosc.NOSHUFFLE, "byte": Blosc.SHUFFLE, "bit": Blosc.BITSHUFFLE}
CANDIDATES = [
    ("zstd", 1, "byte"),  # the store's codec today
    ("zstd", 1, "bit"),
    ("zstd", 3, "byte"),
    ("zstd", 3, "bit"),
    ("zstd", 1, "none"),
    ("lz4", 1, "byte"),
    ("lz4", 1, "bit"),
    ("lz4", 5, "bit"),
    ("lz4hc", 3, "bit"),
    ("blosclz", 5, "bit"),
]


def hidden_chunks(tokens: int, seed: int) -> list[np.ndarray]:
    loaded = build_synthetic("cuda", num_layers=64, seed=seed)
    featureset = FeatureSet(layers=[1, 16, 31, 46, 61])
    vocab = int(loaded.config.vocab_size)
    generator = torch.Generator().manual_seed(seed)
    chunks: list[np.ndarray] = []
    with torch.inference_mode():
        for _ in range(max(1, tokens // 2048)):
            ids = torch.randint(0, vocab - 1024, (1, 2048), generator=generator).cuda()
            hidden, _ = ForwardPlan.of(featureset, len(loaded.body.layers)).capture(loaded.body, ids)
            array = hidden[0].contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
            chunks.extend(np.ascontiguousarray(b) for _, b in blocks(array, (256, 1, array.shape[2])))
    del loaded
    torch.cuda.empty_cache()
    return chunks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    chunks = hidden_chunks(args.tokens, seed=0)
    raw = sum(c.nbytes for c in chunks)
    blosc.set_nthreads(1)  # per-thread figures: the store spreads chunks over a pool itself
    rows = []
    for cname, clevel, shuffle in CANDIDATES:
        codec = Blosc(cname=cname, clevel=clevel, shuffle=SHUFFLES[shuffle], blocksize=0)
        encoded = [codec.encode(c) for c in chunks]
        for chunk, blob in zip(chunks, encoded, strict=True):  # every candidate must give the bits back
            assert np.array_equal(np.frombuffer(codec.decode(blob), dtype=np.uint16).reshape(chunk.shape), chunk)
        encode_s = timed(lambda codec=codec: [codec.encode(c) for c in chunks], args.repeats)
        decode_s = timed(lambda codec=codec, encoded=encoded: [codec.decode(b) for b in encoded], args.repeats)
        rows.append(
            {
                "codec": f"blosc {cname} clevel {clevel} {shuffle}-shuffle",
                "ratio": raw / sum(len(b) for b in encoded),
                "encode_gbs_per_thread": raw / encode_s / GB,
                "decode_gbs_per_thread": raw / decode_s / GB,
            }
        )
        row = rows[-1]
        print(
            f"{row['codec']:38} ratio {row['ratio']:.3f}  encode {row['encode_gbs_per_thread']:.2f} GB/s  "
            f"decode {row['decode_gbs_per_thread']:.2f} GB/s",
            flush=True,
        )
    copy_s = timed(lambda: [c.copy() for c in chunks], args.repeats)
    record = {
        "command": " ".join(["python", *sys.argv]),
        "device": torch.cuda.get_device_name(0),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "data": f"hidden states of the 27B-shaped target (seed 0), layers 1,16,31,46,61, {len(chunks)} chunks of "
        f"256x1x5120 bf16 from {max(1, args.tokens // 2048)} sequences of 2048 random tokens",
        "raw_bytes": raw,
        "memcpy_gbs_per_thread": raw / copy_s / GB,
        "codecs": rows,
    }
    print(json.dumps({"memcpy_gbs_per_thread": record["memcpy_gbs_per_thread"], "chunks": len(chunks)}))
    if args.out:
        args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
