"""How fast a reader unpacks stored chunk frames: `schemas.stored_chunk.chunk_bytes` (C-Blosc2, the interpreter lock
released) against numcodecs' `Blosc.decode` (C-Blosc1: what every reader used before), side by side in one run.
Chunks as the store writes them (256 tokens x 1 layer x 5120 bf16, `benchmarks.serve.hidden_like` values), every
codec of `schemas.codecs`, each decoded into a per-thread scratch by 1..n threads at once, the two decoders
interleaved round by round; the best round counts. Ours also checks each frame's crc32c, as every read does. Prints
GB/s (of decoded bytes) per decoder and thread count, the ratio, and the JSON record last. First, the ceiling: the
same bytes only copied, at each thread count (how far the host's memory lets any per-byte work scale with threads).

    python benchmarks/frame_decode.py --threads 1,2   # a minute on 2 cores
    python benchmarks/frame_decode.py --threads 1,2,4,8,12 --rounds 2 \
        --out benchmarks/results/frame-decode-h200host.json   # on the GPU host
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from numcodecs import Blosc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.records import record_header
from benchmarks.serve import hidden_like
from schemas.chunks import crc32c
from schemas.codecs import StoreCodec
from schemas.stored_chunk import chunk_bytes
from service.storage.shard_writer import blosc_for

GB = 1e9


def frames(codec: StoreCodec, chunks: list[np.ndarray]) -> list[bytes]:
    writer = blosc_for(codec)
    encoded = [writer.encode(c) for c in chunks]
    return [e + crc32c(e) for e in encoded]


def rate(decode, framed: list[bytes], nbytes: int, threads: int, passes: int) -> float:
    """GB/s of decoded bytes with `threads` threads each decoding every frame `passes` times into its own scratch."""

    def work(_: int) -> None:
        scratch = np.empty(nbytes, dtype=np.uint8)
        for _ in range(passes):
            for frame in framed:
                decode(frame, scratch)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: None, range(threads)))  # the threads exist before the clock starts
        start = time.perf_counter()
        list(pool.map(work, range(threads)))
        elapsed = time.perf_counter() - start
    return threads * passes * len(framed) * nbytes / GB / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tokens", type=int, default=2048, help="of one entry: its 5 layers are the chunks decoded")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    counts = [n for n in map(int, args.threads.split(",")) if n <= len(os.sched_getaffinity(0))]
    hidden = hidden_like(args.tokens, 5120, 0).view(torch.int16).numpy().view(np.uint16)
    chunks = [
        np.ascontiguousarray(hidden[t : t + 256, layer : layer + 1])
        for t in range(0, args.tokens, 256)
        for layer in range(hidden.shape[1])
    ]
    nbytes = chunks[0].nbytes
    numcodecs = Blosc()

    def before(frame: bytes, scratch: np.ndarray) -> None:
        numcodecs.decode(memoryview(frame)[:-4], out=scratch)

    def after(frame: bytes, scratch: np.ndarray) -> None:
        chunk_bytes(memoryview(frame), nbytes, scratch)

    def copy(frame: bytes, scratch: np.ndarray) -> None:  # the ceiling: the same bytes moved, nothing decoded
        np.copyto(scratch, np.frombuffer(frame, dtype=np.uint8)[16 : 16 + nbytes])

    plain = frames(StoreCodec.UNCOMPRESSED, chunks)
    memcpy = {n: max(rate(copy, plain, nbytes, n, args.passes) for _ in range(args.rounds)) for n in counts}
    first = min(counts)
    for n in counts:
        linear = memcpy[n] / (memcpy[first] * n / first)
        print(f"memcpy of the chunks  {n:>2} threads  {memcpy[n]:6.2f} GB/s  ({linear:.2f} of linear)")
    results = {}
    for codec in StoreCodec:
        framed = frames(codec, chunks)
        for frame, chunk in zip(framed, chunks, strict=True):  # both give the bits back
            scratch = np.empty(nbytes, dtype=np.uint8)
            before(frame, scratch)
            assert scratch.tobytes() == chunk.tobytes()
            assert chunk_bytes(memoryview(frame), nbytes, scratch).tobytes() == chunk.tobytes()
        best: dict[str, dict[int, float]] = {"numcodecs": {}, "schemas.stored_chunk": {}}
        for _ in range(args.rounds):
            for n in counts:
                for name, decode in (("numcodecs", before), ("schemas.stored_chunk", after)):
                    got = rate(decode, framed, nbytes, n, args.passes)
                    best[name][n] = max(best[name].get(n, 0.0), got)
        ratio = sum(c.nbytes for c in chunks) / sum(len(f) for f in framed)
        results[codec.value] = {
            "ratio": ratio,
            "gbs": {name: {str(n): g for n, g in per.items()} for name, per in best.items()},
            "speedup": {str(n): best["schemas.stored_chunk"][n] / best["numcodecs"][n] for n in counts},
        }
        for n in counts:
            print(
                f"{codec.value:<15} ratio {ratio:.3f}  {n:>2} threads  numcodecs {best['numcodecs'][n]:6.2f} GB/s  "
                f"schemas.stored_chunk {best['schemas.stored_chunk'][n]:6.2f} GB/s  "
                f"x{results[codec.value]['speedup'][str(n)]:.2f}",
                flush=True,
            )
    record = {
        **record_header(),
        "data": f"{len(chunks)} chunks of 256x1x5120 bf16 (benchmarks.serve.hidden_like), decoded into a scratch",
        "threads": counts,
        "rounds": args.rounds,
        "memcpy_gbs": {str(n): g for n, g in memcpy.items()},
        "codecs": results,
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=2))
    print(json.dumps(record))


if __name__ == "__main__":
    main()
