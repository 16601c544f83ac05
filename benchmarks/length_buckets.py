"""Batches bucketed by length against batches as they come (#62): the padding share, and what a trainer's loader
delivers, side by side in one run.

  synthetic  the short (128–2,048 tokens) and long (256–8,192) mixes of benchmarks/extract.py, 10^5 entries each:
             the share of a right-padded batch's positions that is padding, at batches of 8 and 16, with and without
             `bucketed_batches` (a seeded order either way)
  served     the tiny model's entries of the short mix's lengths, extracted here, served by `hsstore serve` in its own
             process, read by `EntryStream.of_dataset` into a DataLoader of batches of 8, seeded, with and without
             `bucket_batch=8`, rounds interleaved: entries/s, real tokens/s, and the padding share of what arrived

    python benchmarks/length_buckets.py --out benchmarks/results/length-buckets-cpu.json
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serve import start_service
from client import EntryStream, FeatureClient, pad_collate
from client.training.length_buckets import bucketed_batches, padding_share
from schemas.api import ExtractRequest
from service.main import build_services
from service.model.devmodel import build_devmodel
from service.settings import Settings

MIXES = {"short": (128, 2048), "long": (256, 8192)}


def lengths_of(mix: str, count: int, seed: int) -> list[int]:
    low, high = MIXES[mix]
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


def synthetic(count: int) -> dict:
    out: dict = {}
    for mix in MIXES:
        lengths = lengths_of(mix, count, seed=1)
        for batch in (8, 16):
            order = np.random.default_rng(0).permutation(count)
            shuffled = [order[i : i + batch].tolist() for i in range(0, count, batch)]
            bucketed = bucketed_batches(lengths, batch, seed=0)
            out[f"{mix}_batch_{batch}"] = {
                "padding_share_shuffled": padding_share(lengths, shuffled),
                "padding_share_bucketed": padding_share(lengths, bucketed),
            }
            print(mix, batch, json.dumps(out[f"{mix}_batch_{batch}"]), flush=True)
    return out


def served(entries: int, rounds: int, root: Path) -> dict:
    model = build_devmodel(root / "model")
    lengths = lengths_of("short", entries, seed=2)
    ids = [np.random.default_rng(i).integers(0, 1000, n).tolist() for i, n in enumerate(lengths)]
    services = build_services(Settings(data_dir=root / "store", model_dir=model, device="cpu"))
    try:
        started = time.perf_counter()
        request = ExtractRequest(samples=[{"token_ids": one} for one in ids])
        results = [result.manifest for result in services.writer.extract(request).results]
        extract_s = time.perf_counter() - started
    finally:
        services.close()
    server, url = start_service(root / "store")
    try:
        with FeatureClient(url) as client:
            client.create_dataset("short-mix", [m.feature_key() for m in results])
        modes = {"shuffled": None, "bucketed": 8}
        seen: dict[str, list[dict]] = {mode: [] for mode in modes}
        for round_ in range(rounds):
            for mode in list(modes) if round_ % 2 == 0 else list(reversed(modes)):
                stream = EntryStream.of_dataset(url, "short-mix", seed=0, bucket_batch=modes[mode], prefetch=8)
                stream.set_epoch(round_)
                loader = DataLoader(stream, batch_size=8, collate_fn=pad_collate)
                start, count, real, positions = time.perf_counter(), 0, 0, 0
                for batch in loader:
                    mask = batch["attention_mask"]
                    count, real, positions = count + mask.shape[0], real + int(mask.sum()), positions + mask.numel()
                elapsed = time.perf_counter() - start
                seen[mode].append(
                    {"entries_s": count / elapsed, "tokens_s": real / elapsed, "padding_share": 1 - real / positions}
                )
                print(f"round {round_} {mode}: {json.dumps(seen[mode][-1])}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    best = {mode: max(runs, key=lambda run: run["entries_s"]) for mode, runs in seen.items()}
    return {
        "entries": entries,
        "tokens": sum(lengths),
        "extract_s": extract_s,
        "rounds": seen,
        "best": best,
        "bucketed_over_shuffled_entries_s": best["bucketed"]["entries_s"] / best["shuffled"]["entries_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record: dict = {"command": " ".join(["python", *sys.argv]), "commit": commit}
    record["synthetic"] = synthetic(args.synthetic)
    with tempfile.TemporaryDirectory(prefix="hsstore-buckets-") as root:
        record["served"] = served(args.entries, args.rounds, Path(root))
    print(json.dumps(record, indent=2))
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
