"""The codecs a store writes its chunks with, chosen by measurement (`benchmarks/codecs.py`, the table in
docs/measurements.md): every one is a blosc configuration, so each chunk names its own codec in its blosc header and
any of them reads back whatever the store's current setting is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StoreCodec(StrEnum):
    # bit-shuffle + lz4: 1.25x on the 27B target's hidden states; decodes at 3.3 GB/s per thread on the GPU host's
    # CPU through `schemas.stored_chunk` (blosc2), 1.8 through numcodecs (`benchmarks/frame_decode.py`)
    LZ4_BITSHUFFLE = "lz4-bitshuffle"
    # byte-shuffle + zstd level 1: 1.29x, decodes at 0.44 GB/s per thread; the default before the measurement
    ZSTD1_SHUFFLE = "zstd1-shuffle"
    # no compression (blosc level 0: each frame a header and a memcpy): for a store that feeds trainers from local
    # disk, or through a replica to clients short of cores, where decoding costs a reader more than the 1.25x of
    # bytes it saves (a 12-core client through the service: 10.2 GB/s against 7.6 with numcodecs' decoder, before
    # blosc2's brought the default codec to 7.7-8.8; `benchmarks/feed.py`)
    UNCOMPRESSED = "uncompressed"


@dataclass(frozen=True, slots=True)
class BloscParams:
    cname: str
    clevel: int
    shuffle: str  # Zarr v3's name: "noshuffle" | "shuffle" | "bitshuffle"


BLOSC: dict[StoreCodec, BloscParams] = {
    StoreCodec.LZ4_BITSHUFFLE: BloscParams("lz4", 5, "bitshuffle"),
    StoreCodec.ZSTD1_SHUFFLE: BloscParams("zstd", 1, "shuffle"),
    StoreCodec.UNCOMPRESSED: BloscParams("lz4", 0, "noshuffle"),
}
DEFAULT_CODEC = StoreCodec.LZ4_BITSHUFFLE
# What each codec gave on the 27B target's entries, per featureset dtype (bf16: benchmarks/results/codecs-h200.json;
# fp8 with its scales: benchmarks/results/featuresets-h200.json): an estimate's ratio before any entry of the
# featureset is stored here. A pair not measured is not guessed: the estimate then assumes no compression.
MEASURED_RATIO: dict[tuple[StoreCodec, str], float] = {
    (StoreCodec.LZ4_BITSHUFFLE, "bfloat16"): 1.246,
    (StoreCodec.ZSTD1_SHUFFLE, "bfloat16"): 1.290,
    (StoreCodec.LZ4_BITSHUFFLE, "float8_e4m3fn"): 1.079,
    # not a measurement but the definition: every chunk stored as it is, behind blosc's 16-byte header
    (StoreCodec.UNCOMPRESSED, "bfloat16"): 1.0,
    (StoreCodec.UNCOMPRESSED, "float8_e4m3fn"): 1.0,
}
