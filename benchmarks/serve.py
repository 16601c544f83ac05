"""Serving benchmark on this machine, side by side in one run, N entries shaped like [T, 5, 5120] bf16:

  (a) the Zarr store read straight in-process (every chunk crc32c-checked), and the same plus the content hash;
  (b) through the running service (`hsstore serve` in its own process) with FeatureClient.get_many, verified;
  (c) through the batch endpoint (FeatureClient.get_batch), verified.

Prints GB/s of each and the ratios (b)/(a), (c)/(a); also the store's compression ratio and write GB/s, and the
rates of the pieces (chunk decode, sha256, loopback transfer) that bound (b) on a small machine. The last line is
one JSON object.

    python benchmarks/serve.py --quick                       # under a minute
    python benchmarks/serve.py --out benchmarks/results/serve-cpu.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import timed
from client import FeatureClient
from schemas.backend import Fingerprint
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.manifest import Manifest, TensorInfo
from schemas.prompt_hash import prompt_hash
from schemas.timestamps import utc_now
from schemas.torch_tensors import from_torch
from service.core.writer import FeatureWriter
from service.main import build_services
from service.settings import Settings

GB = 1e9
FEATURESET = FeatureSet(layers=[1, 16, 31, 46, 61])


def hidden_like(tokens: int, hidden: int, seed: int) -> torch.Tensor:
    """bf16 with a per-layer scale and heavy-ish tails, like residual streams (compresses about as well)."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.tensor([0.5, 2.0, 4.0, 8.0, 16.0]).view(1, 5, 1)
    values = torch.randn((tokens, 5, hidden), generator=generator) * scales
    values[:, :, :8] *= 20  # a few outlier channels, as real models have
    return values.to(torch.bfloat16)


def populate(writer: FeatureWriter, entries: int, tokens: int, hidden: int) -> tuple[list[Manifest], float, int]:
    bases = [hidden_like(tokens, hidden, seed) for seed in range(min(entries, 4))]
    manifests, raw, elapsed = [], 0, 0.0
    for i in range(entries):
        ids = [(i * 7919 + t) % 248000 for t in range(tokens)]
        tensors = [
            from_torch("hidden_states", bases[i % len(bases)]),
            from_torch("input_ids", torch.tensor(ids, dtype=torch.int32)),
        ]
        digest = content_hash(tensors)
        manifest = Manifest(
            prompt_hash=prompt_hash({"token_ids": ids}),
            model_revision="sha256:" + "b" * 64,
            backend="fla",
            featureset=FEATURESET,
            featureset_id=FEATURESET.id,
            content_hash=digest,
            sample={"token_ids": ids},
            num_tokens=tokens,
            prompt_tokens=tokens,
            completion_tokens=0,
            tensors={t.name: TensorInfo(dtype=t.dtype, shape=list(t.shape)) for t in tensors},
            layer_stats=[],
            fingerprint=Fingerprint(
                torch=torch.__version__,
                transformers="-",
                device="benchmark",
                dtype="bfloat16",
                attn_implementation="-",
                kernels={},
            ),
            created_at=utc_now(),
        )
        start = time.perf_counter()
        writer.record(manifest, tensors)
        elapsed += time.perf_counter() - start
        raw += sum(t.nbytes for t in tensors)
        manifests.append(manifest)
    return manifests, elapsed, raw


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="4 entries, 1 repeat: under a minute")
    parser.add_argument("--entries", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--parallel", type=int, default=2, help="client threads / connections (2 fit 2 cores best)")
    parser.add_argument("--batch", type=int, default=2, help="keys per batch request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.entries, args.repeats = 4, 1

    root = Path(tempfile.mkdtemp(prefix="hsstore-serve-"))
    services = build_services(Settings(data_dir=root))  # no model: the store and catalog a replica serves
    manifests, write_s, raw = populate(services.writer, args.entries, args.tokens, args.hidden)
    stored = sum(p.stat().st_size for p in (root / "blobs").rglob("*") if p.is_file())
    payload = sum(m.num_tokens * (5 * args.hidden * 2 + 4) for m in manifests)
    result: dict = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "entries": args.entries,
        "shape": [args.tokens, 5, args.hidden],
        "payload_gb": payload / GB,
        "write_gbs": raw / write_s / GB,
        "compression_ratio": raw / stored,
    }

    def store_read(verify: bool) -> None:
        for m in manifests:
            tensors = services.store.get(m.content_hash)
            if verify:
                assert content_hash(tensors.values()) == m.content_hash

    result["store_gbs"] = payload / timed(lambda: store_read(False), args.repeats) / GB
    result["store_verified_gbs"] = payload / timed(lambda: store_read(True), args.repeats) / GB

    port = free_port()
    env = {**os.environ, "HSSTORE_DATA_DIR": str(root), "HSSTORE_PORT": str(port), "HSSTORE_HOST": "127.0.0.1"}
    env.pop("HSSTORE_MODEL_DIR", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "hsstore.cli", "serve"], env=env, cwd=Path(__file__).resolve().parents[1]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        keys = [{"prompt_hash": m.prompt_hash} for m in manifests]
        with FeatureClient(url, max_connections=args.parallel) as client:
            client.get_many(keys[:2])  # connections up, server warm

            def through_client() -> None:
                assert [f.content_hash for f in client.get_many(keys)] == [m.content_hash for m in manifests]

            def through_batch() -> None:
                groups = [keys[i : i + args.batch] for i in range(0, len(keys), args.batch)]
                got = [f for group in client._pool.map(client.get_batch, groups) for f in group]  # type: ignore[union-attr]
                assert [f.content_hash for f in got] == [m.content_hash for m in manifests]

            result["client_gbs"] = payload / timed(through_client, args.repeats) / GB
            result["batch_gbs"] = payload / timed(through_batch, args.repeats) / GB

            # Where the time goes: the same bytes over loopback without decoding or hashing them.
            http = client._http

            def transfer_only() -> None:
                def fetch(key: dict) -> int:
                    return len(http.get(f"/v1/features/{key['prompt_hash']}").content)

                assert sum(client._pool.map(fetch, keys)) > 0  # type: ignore[union-attr]

            result["transfer_only_gbs"] = payload / timed(transfer_only, args.repeats) / GB
    finally:
        server.terminate()
        server.wait(timeout=30)

    sample = bytes(from_torch("h", hidden_like(args.tokens, args.hidden, 0)).data)
    result["sha256_gbs_one_core"] = len(sample) / timed(lambda: hashlib.sha256(sample).digest(), 3) / GB
    result["client_over_store"] = result["client_gbs"] / result["store_gbs"]
    result["batch_over_store"] = result["batch_gbs"] / result["store_gbs"]
    result["client_over_store_verified"] = result["client_gbs"] / result["store_verified_gbs"]
    shutil.rmtree(root, ignore_errors=True)

    print(f"payload {result['payload_gb']:.2f} GB in {args.entries} entries of {result['shape']} bf16")
    print(f"write {result['write_gbs']:.2f} GB/s, compression ratio {result['compression_ratio']:.2f}")
    print(
        f"(a) store in-process        {result['store_gbs']:.2f} GB/s  (+ content hash: "
        f"{result['store_verified_gbs']:.2f} GB/s)"
    )
    print(
        f"(b) service + client        {result['client_gbs']:.2f} GB/s  (b)/(a) = {result['client_over_store']:.2f}"
        f"  vs verified (a): {result['client_over_store_verified']:.2f}"
    )
    print(f"(c) batch endpoint          {result['batch_gbs']:.2f} GB/s  (c)/(a) = {result['batch_over_store']:.2f}")
    print(
        f"pieces: loopback transfer alone {result['transfer_only_gbs']:.2f} GB/s, "
        f"sha256 {result['sha256_gbs_one_core']:.2f} GB/s per core, {os.cpu_count()} cores"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
