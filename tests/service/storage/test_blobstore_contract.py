"""The local Zarr store passes the shipped contract suite, and keeps its own layout promises."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from schemas.codecs import BLOSC, StoreCodec
from schemas.content_hash import content_hash
from schemas.files import staging_path
from service.storage import LocalZarrStore, shard_reader
from service.storage.object_store import ObjectZarrStore
from service.storage.testing import BlobStoreTests, tensors
from tests.support.s3_server import Bucket


class TestLocalZarrStore(BlobStoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[LocalZarrStore]:
        yield LocalZarrStore(tmp_path / "store", chunk_tokens=64)


class TestS3ZarrStore(BlobStoreTests):
    """The same suite against a real S3-API server (moto on 127.0.0.1), through obstore."""

    @pytest.fixture
    def store(self, bucket: Bucket) -> Iterator[ObjectZarrStore]:
        yield ObjectZarrStore(bucket.obstore("hsstore"), chunk_tokens=64)


class TestObjectStoreOnSharedFilesystem(BlobStoreTests):
    """The object layout on a shared filesystem (obstore's LocalStore: an NFS or Lustre mount every host sees)."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[ObjectZarrStore]:
        from obstore.store import LocalStore

        (tmp_path / "shared").mkdir()
        yield ObjectZarrStore(LocalStore(tmp_path / "shared"), chunk_tokens=64)


def test_zarr_python_opens_a_blob_straight_from_the_bucket(bucket: Bucket) -> None:
    from zarr.storage import ObjectStore

    store = ObjectZarrStore(bucket.obstore(), chunk_tokens=64)
    written = tensors()
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    hexdigest = digest.removeprefix("sha256:")
    group = zarr.open_group(ObjectStore(bucket.obstore(f"blobs/{hexdigest[:2]}/{hexdigest}"), read_only=True), mode="r")
    for tensor in written:
        assert np.array_equal(group[tensor.name][:], tensor.numpy())
    assert group.attrs["hsstore"]["content_hash"] == digest


def test_a_blob_is_invisible_until_its_group_object_is_put(bucket: Bucket) -> None:
    """A writer that died after its arrays but before the commit object left nothing a reader sees; writing the same
    content again completes it."""
    import obstore

    store = ObjectZarrStore(bucket.obstore(), chunk_tokens=64)
    written = tensors()
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    hexdigest = digest.removeprefix("sha256:")
    obstore.delete(bucket.obstore(), f"blobs/{hexdigest[:2]}/{hexdigest}/zarr.json")  # as if it never got there
    assert not store.exists(digest) and list(store.iter()) == []
    with pytest.raises(KeyError):
        store.get(digest)
    assert store.put_if_absent(digest, written).written is True
    assert content_hash(store.get(digest).values()) == digest


def test_two_writers_of_one_content_agree_on_one_winner(bucket: Bucket) -> None:
    first, second = (ObjectZarrStore(bucket.obstore(), chunk_tokens=64) for _ in range(2))
    written = tensors()
    digest = content_hash(written)
    outcomes = [first.put_if_absent(digest, written).written, second.put_if_absent(digest, written).written]
    assert outcomes == [True, False]


@pytest.mark.parametrize("codec", list(StoreCodec))
def test_local_layout_is_sharded_blosc_with_crc_and_every_codec_reads(tmp_path: Path, codec: StoreCodec) -> None:
    import json

    store = LocalZarrStore(tmp_path, chunk_tokens=64, codec=codec)
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
    params = BLOSC[codec]
    assert (blosc["cname"], blosc["clevel"], blosc["shuffle"]) == (params.cname, params.clevel, params.shuffle)
    shard_files = list((tmp_path / "blobs" / hexdigest[:2] / hexdigest / "hidden_states").rglob("c/*/*/*"))
    assert len(shard_files) == 1  # one shard per array
    # a store set to write another codec still reads this one, as does zarr itself
    other = next(c for c in StoreCodec if c != codec)
    read = LocalZarrStore(tmp_path, chunk_tokens=64, codec=other).get(digest)
    assert {n: bytes(t.data) for n, t in read.items()} == {t.name: bytes(t.data) for t in written}
    group = zarr.open_group(tmp_path / "blobs" / hexdigest[:2] / hexdigest, mode="r")
    assert bytes(group["hidden_states"][:].tobytes()) == bytes(
        next(t for t in written if t.name == "hidden_states").data
    )


def test_corrupted_chunk_is_detected(tmp_path: Path) -> None:
    store = LocalZarrStore(tmp_path, chunk_tokens=64)
    written = tensors()
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    (shard,) = (p for p in (tmp_path / "blobs").rglob("hidden_states/c/*/*/*") if p.is_file())
    raw = bytearray(shard.read_bytes())
    raw[200] ^= 0xFF
    shard.write_bytes(raw)
    with pytest.raises(ValueError, match="crc32c"):
        store.get(digest)


def test_dead_writers_staging_is_swept_on_open(tmp_path: Path) -> None:
    LocalZarrStore(tmp_path)
    leftover = tmp_path / "tmp" / "abc.~999999999.deadbeef"
    leftover.mkdir()
    live = staging_path(tmp_path / "tmp", "def")  # this process is alive: its staging stays
    live.mkdir()
    LocalZarrStore(tmp_path)
    assert not leftover.exists() and live.exists()


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


@pytest.mark.parametrize("inline_bytes", [0, 1 << 40], ids=["pool", "here"])
def test_chunks_are_decoded_on_the_pool_or_here_by_their_size_with_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline_bytes: int
) -> None:
    """A read of fewer bytes than `INLINE_BYTES` decodes its chunks on the calling thread (a pool thread's hand-off
    costs more than a small read); a larger one on the codec pool. Both ways forced, whatever the host."""
    store = LocalZarrStore(tmp_path / "store", chunk_tokens=64)
    written = tensors()  # 300 tokens: 5 chunks an array
    digest = content_hash(written)
    store.put_if_absent(digest, written)
    decoded_on: set[str] = set()
    real = shard_reader.chunk_bytes

    def chunk_bytes(raw: memoryview, nbytes: int, out: np.ndarray | None = None) -> np.ndarray:
        decoded_on.add(threading.current_thread().name)
        return real(raw, nbytes, out)

    monkeypatch.setattr(shard_reader, "chunk_bytes", chunk_bytes)
    monkeypatch.setattr(shard_reader, "INLINE_BYTES", inline_bytes)
    read = store.get(digest)
    assert {t.name: t.numpy().tobytes() for t in written} == {n: t.numpy().tobytes() for n, t in read.items()}
    if inline_bytes:
        assert decoded_on == {threading.current_thread().name}
    else:
        assert decoded_on and all(name.startswith("hsstore-codec") for name in decoded_on)
