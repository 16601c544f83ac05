"""Direct reads: the client resolves keys through the service and reads the chunks from the S3 bucket (moto's
server) with ranged GETs on presigned URLs, verifying them as it decodes: bit-equal to reads through the service,
a changed byte in the bucket refused, and a clear error where the blobs are on the service's own disk."""

from __future__ import annotations

from pathlib import Path

import obstore
import pytest

from client import DirectReadsUnavailableError, FeatureClient, IntegrityError
from schemas.manifest import Manifest
from tests.support.s3_server import Bucket

LAYERS = ["embed", 1, 2, 3]


@pytest.fixture
def written(s3_url: str) -> list[Manifest]:
    samples = [{"text": f"def direct_{i}(x): return x * {i}\n" * (3 + 3 * i)} for i in range(3)]
    with FeatureClient(s3_url) as client:
        return [r.manifest for r in client.extract(samples, featureset=LAYERS).results]


def _arrays(features) -> dict[str, bytes]:
    return {name: bytes(t.data) for name, t in features.tensors.items()}


def test_direct_reads_are_bit_equal_to_service_reads(s3_url: str, written: list[Manifest], bucket: Bucket) -> None:
    with FeatureClient(s3_url) as service, FeatureClient(s3_url, direct_reads=True) as direct:
        for manifest in written:
            for part in ({}, {"layers": [3, "embed"]}, {"tokens": (5, 40)}, {"layers": [2], "tokens": (16, 32)}):
                a, b = direct.fetch(manifest.feature_key(), **part), service.fetch(manifest.feature_key(), **part)
                assert _arrays(a) == _arrays(b) and (a.layers, a.tokens, a.full) == (b.layers, b.tokens, b.full)
        keys = [m.feature_key() for m in written]
        assert [_arrays(f) for f in direct.get_many(keys)] == [_arrays(f) for f in service.get_many(keys)]
        assert [f.content_hash for f in direct.get_batch(keys)] == [m.content_hash for m in written]
        located = direct._http.post("/v1/features:locate", json={"keys": [{"prompt_hash": written[0].prompt_hash}]})
        entry = located.json()["entries"][0]
        assert all(url.startswith(f"{bucket.endpoint}/{bucket.name}/features/blobs/") for url in entry["urls"].values())
        assert "X-Amz-Signature" in next(iter(entry["urls"].values()))  # presigned: the client needs no credentials


def test_a_changed_byte_in_the_bucket_is_refused(s3_url: str, written: list[Manifest], bucket: Bucket) -> None:
    manifest = written[2]
    hexdigest = manifest.content_hash.removeprefix("sha256:")
    path = f"features/blobs/{hexdigest[:2]}/{hexdigest}/hidden_states/c/0/0/0"
    store = bucket.obstore()
    shard = bytearray(bytes(obstore.get(store, path).bytes()))
    shard[len(shard) // 3] ^= 0x10
    obstore.put(store, path, bytes(shard))
    with FeatureClient(s3_url, direct_reads=True) as direct, pytest.raises(IntegrityError):
        direct.fetch(manifest.feature_key())


def test_direct_reads_need_an_object_store(live_url: str) -> None:
    with FeatureClient(live_url) as client:
        manifest = client.extract([{"text": "def local(): pass"}]).results[0].manifest
    with FeatureClient(live_url, direct_reads=True) as direct, pytest.raises(DirectReadsUnavailableError):
        direct.fetch(manifest.feature_key())


def test_direct_reads_use_the_cache_first(s3_url: str, written: list[Manifest], tmp_path: Path) -> None:
    with FeatureClient(s3_url, direct_reads=True, cache=tmp_path / "cache") as client:
        keys = [m.feature_key() for m in written]
        first = client.get_many(keys)

        def no_request(*args: object, **kwargs: object) -> None:
            raise AssertionError(f"a request was made: {args[:3]}")

        client._transport.call = no_request  # every key is pinned by content hash and cached: no request at all
        assert [_arrays(f) for f in client.get_many(keys)] == [_arrays(f) for f in first]
        assert _arrays(client.fetch(keys[0])) == _arrays(first[0])
