"""Direct reads against reads relayed by the service, both from one S3-API bucket (moto's server in its own process
on this machine), interleaved in one run: wall GB/s and CPU-seconds per GB of payload of the client, of the hsstore
service and of the object store, each from its own process's CPU time. The point: with direct reads the service
spends ~nothing per byte (it resolves keys and signs URLs); the bytes are the object store's to serve. moto is a
Python server, far slower than S3 or MinIO: its own figures say nothing of a real store's. Last line: JSON.

    python benchmarks/direct.py --quick
    python benchmarks/direct.py --out benchmarks/results/direct-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serve import GB, Variant, populate, process_cpu_s, start_moto, start_service
from client import FeatureClient
from service.main import build_services
from service.settings import Settings

KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="4 entries, 2 rounds")
    parser.add_argument("--entries", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.entries, args.rounds = 4, 2

    moto, endpoint = start_moto()
    server = None
    try:
        os.environ.update(KEYS)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="hsstore-bench")
        root = Path(tempfile.mkdtemp(prefix="hsstore-direct-"))
        env = {"HSSTORE_STORE_URL": "s3://hsstore-bench/features", "HSSTORE_S3_ENDPOINT": endpoint}
        services = build_services(Settings(data_dir=root, store_url=env["HSSTORE_STORE_URL"], s3_endpoint=endpoint))
        manifests, _, _ = populate(services.recorder, args.entries, args.tokens, args.hidden)
        services.close()
        payload_gb = sum(m.num_tokens * (5 * args.hidden * 2 + 4) for m in manifests) / GB
        server, url = start_service(root, env)
        keys = [m.feature_key() for m in manifests]
        expected = [m.content_hash for m in manifests]
        relayed, direct = FeatureClient(url), FeatureClient(url, direct_reads=True)
        for client in (relayed, direct):
            assert [f.content_hash for f in client.get_many(keys[:1])] == expected[:1]

        def reading(client: FeatureClient):
            return lambda: [f.content_hash for f in client.get_many(keys)] == expected or sys.exit("wrong entries")

        variants = {"relayed": Variant("relayed", reading(relayed)), "direct": Variant("direct", reading(direct))}
        object_cpu = dict.fromkeys(variants, 0.0)

        for _ in range(args.rounds):
            for name, variant in variants.items():
                before = process_cpu_s(moto.pid)
                variant.once(server.pid)
                object_cpu[name] += process_cpu_s(moto.pid) - before
        result = {
            "command": " ".join(["python", *sys.argv]),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "object_store": "moto server (Python) on 127.0.0.1",
            "entries": args.entries,
            "payload_gb": payload_gb,
            "variants": {
                name: {
                    **v.report(payload_gb),
                    "object_store_cpu_s_per_gb": object_cpu[name] / (payload_gb * args.rounds),
                }
                for name, v in variants.items()
            },
        }
        relayed.close()
        direct.close()
    finally:
        for process in (server, moto):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
    print(f"payload {payload_gb:.2f} GB in {args.entries} entries, {args.rounds} rounds, object store: moto")
    print(f"{'variant':<10}{'GB/s':>7}{'client CPU-s/GB':>17}{'hsstore CPU-s/GB':>18}{'store CPU-s/GB':>16}")
    for name, r in result["variants"].items():
        print(
            f"{name:<10}{r['gbs']:>7.2f}{r['client_cpu_s_per_gb']:>17.2f}{r['server_cpu_s_per_gb']:>18.3f}"
            f"{r['object_store_cpu_s_per_gb']:>16.2f}"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
