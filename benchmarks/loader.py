"""Does the training loader keep up? `EntryStream` with a seed (the whole listing shuffled per epoch) in a torch
DataLoader with worker processes, reading from `hsstore serve` in its own process, against a tokens/s target: the
rate a drafter's training consumes. Entries shaped like [T, 5, 5120] bf16 (a 27B target's 5 DFlash layers). Prints
delivered tokens/s, its ratio to the target, and the time the training loop waited per batch; the last line is JSON.

    python benchmarks/loader.py --target-tok-s 20000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serve import populate, start_service
from client import EntryStream, pad_collate
from service.main import build_services
from service.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--target-tok-s", type=float, default=20_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="hsstore-loader-"))
    services = build_services(Settings(data_dir=root))
    populate(services.recorder, args.entries, args.tokens, args.hidden)
    services.close()
    server, url = start_service(root)
    try:
        stream = EntryStream(url, seed=0, prefetch=2)
        loader = DataLoader(stream, batch_size=args.batch, num_workers=args.workers, collate_fn=pad_collate)
        epochs = []
        for epoch in range(args.epochs):
            stream.set_epoch(epoch)  # each worker process gets the stream as it is now: this epoch's order
            tokens, waits, start = 0, [], time.perf_counter()
            asked = time.perf_counter()
            for batch in loader:
                waits.append(time.perf_counter() - asked)
                tokens += int(batch["lengths"].sum())
                asked = time.perf_counter()
            elapsed = time.perf_counter() - start
            epochs.append(
                {"epoch": epoch, "tokens": tokens, "tok_s": tokens / elapsed, "mean_wait_s": sum(waits) / len(waits)}
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    best = max(e["tok_s"] for e in epochs)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "shape": [args.tokens, 5, args.hidden],
        "entries": args.entries,
        "dataloader_workers": args.workers,
        "target_tok_s": args.target_tok_s,
        "epochs": epochs,
        "delivered_tok_s": best,
        "delivered_over_target": best / args.target_tok_s,
    }
    for e in epochs:
        print(f"epoch {e['epoch']}: {e['tok_s']:,.0f} tok/s, waited {e['mean_wait_s'] * 1000:.0f} ms per batch")
    print(f"target {args.target_tok_s:,.0f} tok/s: delivered {best / args.target_tok_s:.2f}x of it")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
