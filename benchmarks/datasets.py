"""Dataset snapshots at scale: an index of N synthetic whole-version keys (1M by default) — its size, the time to
write it, and what every loader process pays per epoch to use it: read and check it against its id, permute it
with the epoch's seed, take its shard, and turn the first thousand positions into keys. Beside it, what the
listing costs instead: manifests of the same entries as `GET /v1/entries` pages them, every worker of every rank,
every epoch (the size of one real manifest here times N). The last line is JSON.

    python benchmarks/datasets.py --out benchmarks/results/datasets-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serve import FEATURESET, populate
from schemas import datasets
from schemas.keys import FeatureKey


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8, help="DataLoader workers per rank")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    hashes = rng.integers(0, 256, size=(args.entries, 2, 32), dtype=np.uint8)
    keys = [
        (
            FeatureKey(
                prompt_hash=hashes[i, 0].tobytes().hex(),
                model_revision="sha256:" + "b" * 64,
                backend="fla",
                featureset=FEATURESET.id,
                content_hash="sha256:" + hashes[i, 1].tobytes().hex(),
            ),
            int(rng.integers(128, 2048)),
        )
        for i in range(args.entries)
    ]
    start = time.perf_counter()
    body = datasets.encode("bench", "2026-12-01T00:00:00Z", keys)
    encode_s = time.perf_counter() - start
    dataset_id = datasets.dataset_id(body)

    start = time.perf_counter()
    index = datasets.decode(body, dataset_id)
    shards = args.ranks * args.workers
    mine = np.random.default_rng([0, 1]).permutation(len(index))[7::shards]
    first = [index.key(int(p)) for p in mine[:1000]]
    load_s = time.perf_counter() - start
    assert len(first) == min(1000, len(mine))

    manifest_bytes = _one_manifest_size()
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "entries": args.entries,
        "index_bytes": len(body),
        "bytes_per_entry": len(body) / args.entries,
        "encode_s": encode_s,
        "load_check_permute_shard_s": load_s,
        "listing_bytes_per_worker_epoch": manifest_bytes * args.entries,
        "listing_bytes_all_workers_epoch": manifest_bytes * args.entries * shards,
        "index_bytes_all_workers_epoch": len(body) * shards,
        "ranks": args.ranks,
        "workers_per_rank": args.workers,
    }
    print(
        f"{args.entries:,} entries: index {len(body) / 1e6:.1f} MB ({len(body) / args.entries:.0f} B each), written "
        f"in {encode_s:.1f} s; a loader process reads, checks, permutes and shards it in {load_s:.2f} s"
    )
    print(
        f"per epoch, {shards} loader processes: {len(body) * shards / 1e9:.1f} GB of index against "
        f"{manifest_bytes * args.entries * shards / 1e12:.2f} TB of listing ({manifest_bytes:,} B a manifest)"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


def _one_manifest_size() -> int:
    """The JSON size of one manifest of the benchmarks' shape, as the listing sends it."""
    import tempfile

    from service.main import build_services
    from service.settings import Settings

    with tempfile.TemporaryDirectory() as root:
        services = build_services(Settings(data_dir=Path(root)))
        manifests, _, _ = populate(services.recorder, 1, 256, 5120)
        stored = services.reader.resolve(manifests[0].feature_key())
        services.close()
    return len(stored.model_dump_json())


if __name__ == "__main__":
    main()
