"""Point reads of a small entry (an eval script's query by prompt hash; the tiny model's 4-token entry, its two layers
and input ids): the service's reader as it is, decoding a read under `shard_reader.INLINE_BYTES` on the calling
thread, against every chunk handed to the codec pool, interleaved in one process (each round runs both, the order
turned each round). Four reads a repetition: whole, one layer, a token range, both.

    python benchmarks/small_reads.py --out benchmarks/results/small-reads-cpu.json

Per way: medians over rounds of wall and CPU milliseconds a read (this process's CPU time: the pool's threads
included), and their ratios (pooled over as it is).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from schemas.tokens import TokenRange
from service.main import build_services
from service.model.devmodel import build_devmodel
from service.model.loader import load_spec, load_weights
from service.settings import Settings
from service.storage import shard_reader

READS = [(None, None), ([2], None), (None, TokenRange(1, 3)), ([1, 2], TokenRange(0, 2))]


def pooled(work: Callable[..., Any], nbytes: int, *items: Sequence[Any]) -> list[Any]:
    """The reader before INLINE_BYTES: every read's preads and decodes on the pool."""
    return list(shard_reader.POOL.map(work, *items))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repetitions", type=int, default=300, help="of the four reads, a way a round")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="hsstore-small-reads-"))
    model_dir = build_devmodel(root / "tiny")
    loaded = load_weights(load_spec(model_dir, "sha256:" + "0" * 64, "cpu"))
    services = build_services(Settings(data_dir=root / "data", model_dir=model_dir, device="cpu"), loaded)
    request = ExtractRequest(samples=[{"text": "flip"}], featureset=FeatureSet(layers=[1, 2]), backend="torch")
    manifest = services.writer.extract(request).results[0].manifest

    ways: dict[str, Callable[..., list[Any]]] = {"as_it_is": shard_reader._each, "pooled": pooled}
    wall: dict[str, list[float]] = {way: [] for way in ways}
    cpu: dict[str, list[float]] = {way: [] for way in ways}
    reads = args.repetitions * len(READS)
    for round_ in range(args.rounds):
        for way in list(ways) if round_ % 2 == 0 else list(reversed(ways)):
            shard_reader._each = ways[way]
            started_cpu, started = time.process_time(), time.perf_counter()
            for _ in range(args.repetitions):
                for layers, tokens in READS:
                    services.reader.read(manifest, layers, tokens)
            wall[way].append((time.perf_counter() - started) / reads * 1e3)
            cpu[way].append((time.process_time() - started_cpu) / reads * 1e3)
    shard_reader._each = ways["as_it_is"]
    services.close()

    record: dict = {**record_header(), "reads_a_round": reads, "rounds": args.rounds}
    for way in ways:
        record[f"{way}_wall_ms"] = statistics.median(wall[way])
        record[f"{way}_cpu_ms"] = statistics.median(cpu[way])
    record["pooled_over_as_it_is_wall"] = record["pooled_wall_ms"] / record["as_it_is_wall_ms"]
    record["pooled_over_as_it_is_cpu"] = record["pooled_cpu_ms"] / record["as_it_is_cpu_ms"]
    print(json.dumps(record), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
