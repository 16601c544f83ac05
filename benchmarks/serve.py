"""Serving benchmark on this machine, N entries shaped like [T, 5, 5120] bf16, the variants interleaved in one run
(each round runs every variant once, in turn, so a noisy neighbour hits them alike):

  store             the Zarr store read in-process (every chunk crc32c-checked)
  store_verified    the same, every chunk also checked against its write-time digest (what the client checks)
  store_hashed      the plain read plus the entry's sha256 content hash
  client_chunks     `hsstore serve` in its own process + FeatureClient.get_many, chunk wire format (default)
  client_safetensors  the same in the safetensors wire format (the service decodes)
  batch_chunks      FeatureClient.get_batch over the chunk wire format

Per variant: wall GB/s (best round) and CPU-seconds per GB of payload of the client (this process's CPU time) and of
the server (its process's CPU time, from /proc), summed over every round; ratios to the in-process verified read of
the same run. The last line is one JSON object.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import blake3
import google_crc32c
import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import timed
from client import FeatureClient
from compute.tensors import from_torch
from schemas.backend import Fingerprint
from schemas.codecs import DEFAULT_CODEC, StoreCodec
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.manifest import Manifest, TensorInfo
from schemas.prompt_hash import prompt_hash
from schemas.timestamps import utc_now
from service.core.write.recorder import Recorder
from service.main import build_services
from service.settings import Settings
from service.storage.protocol import Selection

GB = 1e9
FEATURESET = FeatureSet(layers=[1, 16, 31, 46, 61])


def hidden_like(tokens: int, hidden: int, seed: int) -> torch.Tensor:
    """bf16 with a per-layer scale and heavy-ish tails, like residual streams (compresses about as well)."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.tensor([0.5, 2.0, 4.0, 8.0, 16.0]).view(1, 5, 1)
    values = torch.randn((tokens, 5, hidden), generator=generator) * scales
    values[:, :, :8] *= 20  # a few outlier channels, as real models have
    return values.to(torch.bfloat16)


def populate(recorder: Recorder, entries: int, tokens: int, hidden: int) -> tuple[list[Manifest], float, int]:
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
        recorder.record(manifest, tensors)
        elapsed += time.perf_counter() - start
        raw += sum(t.nbytes for t in tensors)
        manifests.append(manifest)
    return manifests, elapsed, raw


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str) -> None:
    """Until `url` answers without a server error (a minute at most)."""
    for _ in range(600):
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def start_service(
    data_dir: Path, env: Mapping[str, str] | None = None, processes: int = 1, cores: list[int] | None = None
) -> tuple[subprocess.Popen, str]:
    """`hsstore serve --processes N` with no model over `data_dir`, on a free port of 127.0.0.1 (on `cores` if
    given), once ready."""
    port = free_port()
    environment = {**os.environ, **(env or {}), "HSSTORE_DATA_DIR": str(data_dir), "HSSTORE_PORT": str(port)}
    environment["HSSTORE_HOST"] = "127.0.0.1"
    environment.pop("HSSTORE_MODEL_DIR", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "hsstore.cli", "serve", "--processes", str(processes)],
        env=environment,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores is not None else None,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{url}/readyz")
    except BaseException:
        server.terminate()
        raise
    return server, url


def start_moto(cores: list[int] | None = None) -> tuple[subprocess.Popen, str]:
    """moto's S3-API server in its own process on a free port of 127.0.0.1 (on `cores` if given), once it answers."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores is not None else None,
    )
    try:
        wait_ready(endpoint)
    except BaseException:
        moto.terminate()
        raise
    return moto, endpoint


def process_cpu_s(pid: int) -> float:
    """utime + stime of another process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Variant:
    name: str
    run: Callable[[], None]
    walls: list[float] = field(default_factory=list)
    client_cpu: float = 0.0
    server_cpu: float = 0.0

    def once(self, server_pid: int | None) -> None:
        server_before = process_cpu_s(server_pid) if server_pid else 0.0
        cpu_before, start = time.process_time(), time.perf_counter()
        self.run()
        self.walls.append(time.perf_counter() - start)
        self.client_cpu += time.process_time() - cpu_before
        if server_pid:
            self.server_cpu += process_cpu_s(server_pid) - server_before

    def report(self, payload_gb: float) -> dict[str, float]:
        rounds = len(self.walls)
        return {
            "gbs": payload_gb / min(self.walls),
            "client_cpu_s_per_gb": self.client_cpu / (payload_gb * rounds),
            "server_cpu_s_per_gb": self.server_cpu / (payload_gb * rounds),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="4 entries, 2 rounds: under a minute")
    parser.add_argument("--entries", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--parallel", type=int, default=2, help="client threads / connections (2 fit 2 cores best)")
    parser.add_argument("--batch", type=int, default=2, help="keys per batch request")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--codec", type=StoreCodec, default=DEFAULT_CODEC, choices=list(StoreCodec))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.entries, args.rounds = 4, 2

    root = Path(tempfile.mkdtemp(prefix="hsstore-serve-"))
    settings = Settings(data_dir=root, codec=args.codec)
    services = build_services(settings)  # no model: the store and catalog a replica serves
    manifests, write_s, raw = populate(services.recorder, args.entries, args.tokens, args.hidden)
    manifests = [services.reader.resolve(m.feature_key()) for m in manifests]  # as recorded, with chunk digests
    stored = sum(p.stat().st_size for p in (root / "blobs").rglob("*") if p.is_file())
    payload = sum(m.num_tokens * (5 * args.hidden * 2 + 4) for m in manifests)
    payload_gb = payload / GB
    result: dict = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "codec": str(args.codec),
        "entries": args.entries,
        "shape": [args.tokens, 5, args.hidden],
        "payload_gb": payload_gb,
        "write_gbs": raw / write_s / GB,
        "compression_ratio": raw / stored,
    }
    store = services.store

    def store_read(check: str) -> None:
        for m in manifests:
            if check == "digests":
                store.get_slice(m.content_hash, Selection(), m.tensors, check_digests=True)
                continue
            tensors = store.get(m.content_hash)
            if check == "hash":
                assert content_hash(tensors.values()) == m.content_hash

    server, url = start_service(root)
    try:
        keys = [m.feature_key() for m in manifests]
        expected = [m.content_hash for m in manifests]
        chunked = FeatureClient(url, max_connections=args.parallel)
        plain = FeatureClient(url, max_connections=args.parallel, wire_format="safetensors")
        for client in (chunked, plain):
            client.get_many(keys[:2])  # connections up, server warm

        def many(client: FeatureClient) -> Callable[[], None]:
            return lambda: _check([f.content_hash for f in client.get_many(keys)], expected)

        def batches() -> None:
            groups = [keys[i : i + args.batch] for i in range(0, len(keys), args.batch)]
            got = [f for group in chunked._pool.map(chunked.get_batch, groups) for f in group]  # type: ignore[union-attr]
            _check([f.content_hash for f in got], expected)

        variants = [
            Variant("store", lambda: store_read("crc")),
            Variant("store_verified", lambda: store_read("digests")),
            Variant("store_hashed", lambda: store_read("hash")),
            Variant("client_chunks", many(chunked)),
            Variant("client_safetensors", many(plain)),
            Variant("batch_chunks", batches),
        ]
        for _ in range(args.rounds):
            for variant in variants:
                variant.once(server.pid if variant.name.startswith(("client", "batch")) else None)
        chunked.close()
        plain.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    shutil.rmtree(root, ignore_errors=True)

    # the per-byte pieces a verified read is made of, one thread each (chunk digests: why blake3)
    chunk = from_torch("h", hidden_like(256, args.hidden, 0)).data.tobytes()
    result["per_thread_gbs"] = {
        name: len(chunk) / timed(lambda fn=fn: fn(chunk), 20) / GB
        for name, fn in {
            "sha256": lambda b: hashlib.sha256(b).digest(),
            "blake3": lambda b: blake3.blake3(b).digest(),
            "crc32c": google_crc32c.value,
            "memcpy": bytearray,
        }.items()
    }
    reports = {v.name: v.report(payload_gb) for v in variants}
    reference = reports["store_verified"]
    result["variants"] = reports
    for report in reports.values():
        report["wall_over_store_verified"] = report["gbs"] / reference["gbs"]
        report["cpu_over_store_verified"] = report["client_cpu_s_per_gb"] / reference["client_cpu_s_per_gb"]
    result.update(
        store_gbs=reports["store"]["gbs"],
        store_verified_gbs=reference["gbs"],
        store_verified_cpu_s_per_gb=reference["client_cpu_s_per_gb"],
        client_gbs=reports["client_chunks"]["gbs"],
        batch_gbs=reports["batch_chunks"]["gbs"],
        client_cpu_s_per_gb=reports["client_chunks"]["client_cpu_s_per_gb"],
        server_cpu_s_per_gb=reports["client_chunks"]["server_cpu_s_per_gb"],
        safetensors_client_gbs=reports["client_safetensors"]["gbs"],
        safetensors_server_cpu_s_per_gb=reports["client_safetensors"]["server_cpu_s_per_gb"],
    )

    print(f"payload {payload_gb:.2f} GB in {args.entries} entries of {result['shape']} bf16, codec {args.codec}")
    print(f"write {result['write_gbs']:.2f} GB/s, compression ratio {result['compression_ratio']:.3f}")
    print(f"{'variant':<20}{'GB/s':>7}{'client CPU-s/GB':>17}{'server CPU-s/GB':>17}{'wall/ref':>10}{'CPU/ref':>9}")
    for name, r in reports.items():
        print(
            f"{name:<20}{r['gbs']:>7.2f}{r['client_cpu_s_per_gb']:>17.2f}{r['server_cpu_s_per_gb']:>17.2f}"
            f"{r['wall_over_store_verified']:>10.2f}{r['cpu_over_store_verified']:>9.2f}"
        )
    print("(ref: store_verified, the in-process read checked against the same write-time digests)")
    print("per thread, GB/s: " + ", ".join(f"{k} {v:.2f}" for k, v in result["per_thread_gbs"].items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


def _check(got: list[str], expected: list[str]) -> None:
    if got != expected:
        raise SystemExit("a read returned other entries than were asked for")


if __name__ == "__main__":
    main()
