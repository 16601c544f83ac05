"""One contract every BlobStore backend passes unchanged; add a backend by adding a fixture param."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from schemas.content_hash import content_hash
from schemas.tensors import RawTensor
from service.storage import BlobStore, LocalZarrStore, Selection


def tensors(seed: int = 0, tokens: int = 300, layers: int = 3, hidden: int = 16) -> list[RawTensor]:
    rng = np.random.default_rng(seed)
    return [
        RawTensor.from_numpy("hidden_states", "bfloat16", rng.integers(0, 2**16, (tokens, layers, hidden), np.uint16)),
        RawTensor.from_numpy("input_ids", "int32", rng.integers(0, 1000, tokens, np.int32)),
        RawTensor.from_numpy("loss_mask", "uint8", (np.arange(tokens) > tokens // 2).astype(np.uint8)),
    ]


@pytest.fixture(params=["local-zarr"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    if request.param == "local-zarr":
        yield LocalZarrStore(tmp_path / "store", chunk_tokens=64)


class TestBlobStoreContract:
    def test_round_trip_is_bit_exact(self, store: BlobStore) -> None:
        written = tensors()
        digest = content_hash(written)
        assert store.put_if_absent(digest, written) is True
        assert store.exists(digest)
        read = store.get(digest)
        assert content_hash(read.values()) == digest
        assert {t.name: t.dtype for t in read.values()} == {t.name: t.dtype for t in written}

    def test_second_put_of_same_content_is_a_no_op(self, store: BlobStore) -> None:
        written = tensors()
        digest = content_hash(written)
        assert store.put_if_absent(digest, written)
        assert store.put_if_absent(digest, written) is False
        assert list(store.iter()) == [digest]

    def test_slices_match_numpy_slices(self, store: BlobStore) -> None:
        written = tensors(tokens=300)
        digest = content_hash(written)
        store.put_if_absent(digest, written)
        part = store.get_slice(digest, Selection(layer_positions=(0, 2), tokens=(70, 201)))
        expected = written[0].numpy()[70:201][:, [0, 2]]
        assert np.array_equal(part["hidden_states"].numpy(), expected)
        assert np.array_equal(part["input_ids"].numpy(), written[1].numpy()[70:201])
        assert part["hidden_states"].dtype == "bfloat16"

    def test_missing_blob_raises_key_error(self, store: BlobStore) -> None:
        with pytest.raises(KeyError):
            store.get("sha256:" + "0" * 64)
        assert not store.exists("sha256:" + "0" * 64)

    def test_delete_and_iter(self, store: BlobStore) -> None:
        digests = []
        for seed in range(3):
            written = tensors(seed, tokens=10)
            digests.append(content_hash(written))
            store.put_if_absent(digests[-1], written)
        assert sorted(store.iter()) == sorted(digests)
        assert store.delete(digests[0]) is True
        assert store.delete(digests[0]) is False
        assert sorted(store.iter()) == sorted(digests[1:])

    def test_manifest_documents(self, store: BlobStore) -> None:
        store.put_manifest("ab" * 32, b'{"a": 1}')
        store.put_manifest("ab" * 32, b'{"a": 1}')
        store.put_manifest("cd" * 32, b'{"b": 2}')
        assert sorted(store.iter_manifests()) == [b'{"a": 1}', b'{"b": 2}']

    def test_ping(self, store: BlobStore) -> None:
        store.ping()


def test_local_layout_is_sharded_shuffled_zstd_with_crc(tmp_path: Path) -> None:
    import json

    store = LocalZarrStore(tmp_path, chunk_tokens=64)
    written = tensors()
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    hexdigest = digest.removeprefix("sha256:")
    meta = json.loads((tmp_path / "blobs" / hexdigest[:2] / hexdigest / "hidden_states" / "zarr.json").read_text())
    assert meta["attributes"]["dtype"] == "bfloat16" and meta["data_type"] == "uint16"
    (sharding,) = meta["codecs"]
    assert sharding["name"] == "sharding_indexed"
    assert sharding["configuration"]["chunk_shape"] == [64, 1, 16]
    inner = [c["name"] for c in sharding["configuration"]["codecs"]]
    assert inner == ["bytes", "blosc", "crc32c"]
    blosc = sharding["configuration"]["codecs"][1]["configuration"]
    assert blosc["cname"] == "zstd" and blosc["shuffle"] == "shuffle"
    shard_files = list((tmp_path / "blobs" / hexdigest[:2] / hexdigest / "hidden_states").rglob("c/*/*/*"))
    assert len(shard_files) == 1  # one shard per array


def test_corrupted_chunk_is_detected(tmp_path: Path) -> None:
    store = LocalZarrStore(tmp_path, chunk_tokens=64)
    written = tensors()
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    (shard,) = (p for p in (tmp_path / "blobs").rglob("hidden_states/c/*/*/*") if p.is_file())
    raw = bytearray(shard.read_bytes())
    raw[200] ^= 0xFF
    shard.write_bytes(raw)
    with pytest.raises(ValueError, match="checksum"):
        store.get(digest)


def test_dead_writers_staging_is_swept_on_open(tmp_path: Path) -> None:
    LocalZarrStore(tmp_path)
    leftover = tmp_path / "tmp" / "abc.999999999.deadbeef"
    leftover.mkdir()
    LocalZarrStore(tmp_path)
    assert not leftover.exists()


def test_zarr_python_reads_our_blobs_bit_for_bit(tmp_path: Path) -> None:
    """The shard writer and reader are ours; the format is Zarr v3's, so zarr itself must agree with both."""
    import zarr

    store = LocalZarrStore(tmp_path, chunk_tokens=64)
    written = tensors(tokens=300)
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    hexdigest = digest.removeprefix("sha256:")
    group = zarr.open_group(
        store=zarr.storage.LocalStore(tmp_path / "blobs" / hexdigest[:2] / hexdigest, read_only=True), mode="r"
    )
    assert group.attrs["hsstore"]["content_hash"] == digest
    for tensor in written:
        assert np.array_equal(group[tensor.name][...], tensor.numpy()), tensor.name
        assert np.array_equal(group[tensor.name][70:201], tensor.numpy()[70:201])
