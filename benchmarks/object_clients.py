"""Which client library reads the store's shards from an S3-API bucket: obstore (Rust `object_store`; the GIL
released, ranges coalesced and fetched concurrently) against boto3 (the AWS SDK; ranged GetObject calls on a thread
pool), reading the same chunk ranges of the same shards from moto's server in its own process. Reports the client's
CPU-seconds per GB (this process's CPU time) and wall GB/s, interleaved; moto's own speed bounds the wall figures
on this machine, so the client's CPU is the comparison that carries over to a real store. Last line: JSON.

    python benchmarks/object_clients.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import obstore
from obstore.store import S3Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serve import start_moto

CHUNK = 2 << 20  # about one stored chunk of [256, 1, 5120] bf16
SHARD = 128 << 20


def main() -> None:
    moto, endpoint = start_moto()
    try:
        keys = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench", "region_name": "us-east-1"}
        s3 = boto3.client("s3", endpoint_url=endpoint, **keys)
        s3.create_bucket(Bucket="bench")
        s3.put_object(Bucket="bench", Key="shard", Body=os.urandom(SHARD))
        store = S3Store(
            "bench",
            endpoint=endpoint,
            region="us-east-1",
            access_key_id="bench",
            secret_access_key="bench",
            client_options={"allow_http": True},
        )
        starts = list(range(0, SHARD, CHUNK))
        pool = ThreadPoolExecutor(8)

        def with_obstore() -> int:
            return sum(len(b) for b in obstore.get_ranges(store, "shard", starts=starts, lengths=[CHUNK] * len(starts)))

        def with_boto3() -> int:
            def one(start: int) -> int:
                body = s3.get_object(Bucket="bench", Key="shard", Range=f"bytes={start}-{start + CHUNK - 1}")["Body"]
                return len(body.read())

            return sum(pool.map(one, starts))

        results: dict[str, dict[str, list[float]]] = {
            "obstore": {"wall": [], "cpu": []},
            "boto3": {"wall": [], "cpu": []},
        }
        for _ in range(3):
            for name, read in (("obstore", with_obstore), ("boto3", with_boto3)):
                cpu, wall = time.process_time(), time.perf_counter()
                assert read() == SHARD
                results[name]["wall"].append(time.perf_counter() - wall)
                results[name]["cpu"].append(time.process_time() - cpu)
    finally:
        moto.terminate()
        moto.wait(timeout=30)
    gb = SHARD / 1e9
    summary = {
        name: {"gbs": gb / min(r["wall"]), "client_cpu_s_per_gb": sum(r["cpu"]) / (gb * len(r["cpu"]))}
        for name, r in results.items()
    }
    for name, r in summary.items():
        print(f"{name:<8} {r['gbs']:.2f} GB/s wall   client {r['client_cpu_s_per_gb']:.2f} CPU-s/GB")
    print(
        json.dumps(
            {
                "command": "python benchmarks/object_clients.py",
                "shard_bytes": SHARD,
                "range_bytes": CHUNK,
                "object_store": "moto server on 127.0.0.1",
                **summary,
            }
        )
    )


if __name__ == "__main__":
    main()
