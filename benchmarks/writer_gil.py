"""How much of the GIL the service's writers leave the extracting thread: a thread that launches tiny torch ops (as the
extracting thread launches kernels, giving up the GIL at each) spins while `FeatureWriter` writes 27B-width short-mix
entries flat out (hashing, checks, blosc, digests, file writes, catalog), for each way of running the chunks' codecs,
side by side in one process, the order turned each round.

    python benchmarks/writer_gil.py --entries 120 --out benchmarks/results/writer-gil-h100host.json

`launcher_share`: the spinning thread's rate while the writes run over its rate alone (1.0: the writers took
nothing from it). `write_mb_s`: what the writes did meanwhile. The extraction itself is replaced by entries made
beforehand on the CPU (the tiny model's service, the 27B's width: [T, 5, 5120] bfloat16), so only the writers run.
Each variant names the writer threads and their codec threads (`4:16`: what the service ran on a 16-core host before
`write_codec_threads`, 4 writers compressing on the readers' pool of a thread per core), as extract.py's sweep does.
(The record's run named them the other way round, codec threads first, and had 0 for inline codecs.)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.records import record_header
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from schemas.manifest import HIDDEN_STATES
from service.extraction.results import Labels, PendingExtraction
from service.extraction.stats import layer_summary
from service.main import build_services
from service.model.devmodel import build_devmodel
from service.model.encode import EncodedPrompt
from service.model.loader import load_spec, load_weights
from service.settings import Settings

REVISION = "sha256:" + "0" * 64


class Spinner:
    """A thread running tiny CPU torch ops back to back; `rate()` over the last `window`."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        a, b, c = torch.ones(8), torch.ones(8), torch.empty(8)
        while not self._stop.is_set():
            torch.add(a, b, out=c)
            self.count += 1

    def __enter__(self) -> Spinner:
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.rate = self.count / (time.perf_counter() - self._started)


def alone(seconds: float) -> float:
    with Spinner() as spinner:
        time.sleep(seconds)
    return spinner.rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=120)
    parser.add_argument(
        "--variants", default="4:16,4:4,2:2,4:2,3:3", help="writer_threads:write_codec_threads pairs to compare"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    record: dict = {**record_header(), "entries": args.entries, "runs": []}

    root = Path(tempfile.mkdtemp(prefix="hsstore-gil-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    model_dir = build_devmodel(root / "tiny")
    loaded = load_weights(load_spec(model_dir, REVISION, "cpu"))
    rng = random.Random(0)
    pool = [rng.randint(128, 2048) for _ in range(24)]  # short-mix lengths
    lengths = [pool[i % len(pool)] for i in range(args.entries)]
    base = torch.randn(2048, 5, 5120).to(torch.bfloat16)
    made = {n: (base[:n].clone(), torch.arange(n)) for n in set(lengths)}
    summaries = {n: layer_summary(h, ids) for n, (h, ids) in made.items()}
    featureset = FeatureSet.default_for(loaded.num_layers)
    record["tokens"] = sum(lengths)
    record["bytes"] = sum(n * 5 * 5120 * 2 for n in lengths)

    def run(variant: str, index: int) -> dict:
        writers, threads = (int(part) for part in variant.split(":"))
        store = root / f"s-{threads}-{writers}-{index}"
        settings = Settings(
            data_dir=store,
            model_dir=model_dir,
            device="cpu",
            writer_threads=writers,
            write_codec_threads=threads,
            canary=False,
        )
        services = build_services(settings, loaded)
        assert services.models is not None
        extractor = services.models.extractor()

        def made_entries(
            items: Sequence[tuple[EncodedPrompt, str]], featureset: FeatureSet, backend: Backend, **_: object
        ) -> Iterator[tuple[int, PendingExtraction]]:
            fingerprint = extractor.plan(backend).fingerprint
            for i, (encoded, label) in enumerate(items):
                n = len(encoded.prompt_ids)
                hidden = made[n][0].clone()
                hidden[0, 0, 0] = float(i + 1)  # every entry a blob of its own
                host = {HIDDEN_STATES: hidden, "input_ids": made[n][1].to(torch.int32)}
                labels = Labels(list(featureset.layers), label, fingerprint, n, 0, None)
                yield i, PendingExtraction(host, summaries[n], None, labels, i // 12)

        extractor.__dict__["extract_many"] = made_entries  # this service's extractor only: its writes run as ever
        samples = [{"token_ids": [rng.randrange(5, 1000) for _ in range(n)]} for n in lengths]
        request = ExtractRequest(samples=samples, featureset=featureset, backend="torch")
        before = alone(2.0)
        with Spinner() as spinner:
            started = time.perf_counter()
            services.writer.extract(request)
            elapsed = time.perf_counter() - started
        services.close()
        return {
            "variant": variant,
            "codec_threads": threads,
            "writer_threads": writers,
            "round": index,
            "launcher_share": spinner.rate / before,
            "write_s": elapsed,
            "write_mb_s": record["bytes"] / elapsed / 1e6,
        }

    variants = args.variants.split(",")
    for index in range(args.rounds):
        for variant in variants if index % 2 == 0 else list(reversed(variants)):
            result = run(variant, index)
            record["runs"].append(result)
            print(json.dumps(result), flush=True)
    record["by_variant"] = {
        variant: {
            key: sum(r[key] for r in record["runs"] if r["variant"] == variant) / args.rounds
            for key in ("launcher_share", "write_mb_s")
        }
        for variant in variants
    }
    print(json.dumps(record["by_variant"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
