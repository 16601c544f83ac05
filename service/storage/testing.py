"""The contract suite every blob store passes unchanged, shipped with the protocol (as zarr ships
`zarr.testing.store.StoreTests`): a test module subclasses `BlobStoreTests` (the three parts below, one per
protocol of `service.storage.protocol`) and provides the fixture `store`, an empty BlobStore of its engine."""

from __future__ import annotations

import numpy as np
import pytest
from numcodecs import Blosc

from schemas.chunks import crc_ok
from schemas.content_hash import content_hash
from schemas.manifest import TensorInfo
from schemas.tensors import RawTensor
from service.storage.protocol import Blobs, BlobStore, Documents, Selection


def tensors(seed: int = 0, tokens: int = 300, layers: int = 3, hidden: int = 16) -> list[RawTensor]:
    rng = np.random.default_rng(seed)
    return [
        RawTensor.from_numpy("hidden_states", "bfloat16", rng.integers(0, 2**16, (tokens, layers, hidden), np.uint16)),
        RawTensor.from_numpy("input_ids", "int32", rng.integers(0, 1000, tokens, np.int32)),
        RawTensor.from_numpy("loss_mask", "uint8", (np.arange(tokens) > tokens // 2).astype(np.uint8)),
    ]


class BlobsTests:
    """`Blobs`: write once, read whole or in part, checked against the record of the write."""

    def test_round_trip_is_bit_exact(self, store: Blobs) -> None:
        written = tensors()
        digest = content_hash(written)
        assert store.put_if_absent(digest, written).written is True
        assert store.exists(digest)
        read = store.get(digest)
        assert content_hash(read.values()) == digest
        assert {t.name: t.dtype for t in read.values()} == {t.name: t.dtype for t in written}

    def test_second_put_of_same_content_is_a_no_op(self, store: Blobs) -> None:
        written = tensors()
        digest = content_hash(written)
        first = store.put_if_absent(digest, written)
        again = store.put_if_absent(digest, written)
        assert first.written and not again.written
        assert again.chunks == first.chunks  # one content, one layout, one set of digests
        assert list(store.iter()) == [digest]

    def test_slices_match_numpy_slices(self, store: Blobs) -> None:
        written = tensors(tokens=300)
        digest = content_hash(written)
        store.put_if_absent(digest, written)
        part = store.get_slice(digest, Selection(rows=(70, 201), axis1={"hidden_states": (2, 0)}))
        expected = written[0].numpy()[70:201][:, [2, 0]]
        assert np.array_equal(part["hidden_states"].numpy(), expected)
        assert np.array_equal(part["input_ids"].numpy(), written[1].numpy()[70:201])
        assert part["hidden_states"].dtype == "bfloat16"

    def test_stored_bytes(self, store: Blobs) -> None:
        zeros = [RawTensor.from_numpy("hidden_states", "bfloat16", np.zeros((512, 2, 64), np.uint16))]
        digest = content_hash(zeros)
        store.put_if_absent(digest, zeros)
        assert 0 < store.stored_bytes(digest) < zeros[0].nbytes // 4  # zeros compress: what is stored is counted
        with pytest.raises(KeyError):
            store.stored_bytes("sha256:" + "0" * 64)

    def test_missing_blob_raises_key_error(self, store: Blobs) -> None:
        with pytest.raises(KeyError):
            store.get("sha256:" + "0" * 64)
        assert not store.exists("sha256:" + "0" * 64)

    def test_delete_and_iter(self, store: Blobs) -> None:
        digests = []
        for seed in range(3):
            written = tensors(seed, tokens=10)
            digests.append(content_hash(written))
            store.put_if_absent(digests[-1], written)
        assert sorted(store.iter()) == sorted(digests)
        assert store.delete(digests[0]) is True
        assert store.delete(digests[0]) is False
        assert sorted(store.iter()) == sorted(digests[1:])

    def test_ping(self, store: Blobs) -> None:
        store.ping()

    def test_an_empty_axis1_selection_reads_no_columns(self, store: Blobs) -> None:
        written = tensors(tokens=50)
        digest = content_hash(written)
        store.put_if_absent(digest, written)
        part = store.get_slice(digest, Selection(axis1={"hidden_states": ()}))
        assert part["hidden_states"].shape == (50, 0, 16)
        assert np.array_equal(part["input_ids"].numpy(), written[1].numpy())

    def test_reads_are_checked_against_what_was_written(self, store: Blobs) -> None:
        written = tensors(tokens=300)
        digest = content_hash(written)
        chunks = store.put_if_absent(digest, written).chunks
        infos = {t.name: TensorInfo(dtype=t.dtype, shape=list(t.shape), chunks=chunks[t.name]) for t in written}
        part = store.get_slice(digest, Selection(rows=(70, 201), axis1={"hidden_states": (1,)}), infos)
        assert np.array_equal(part["hidden_states"].numpy(), written[0].numpy()[70:201][:, [1]])
        for name in ("hidden_states", "input_ids"):  # a record the blob does not match is refused, never served
            wrong_shape = dict(infos, **{name: infos[name].model_copy(update={"shape": [301, *infos[name].shape[1:]]})})
            with pytest.raises(ValueError):
                store.get_slice(digest, Selection(rows=(0, 10)), wrong_shape)
            digests = list(chunks[name].digests)
            digests[0] = "0" * 32
            wrong_digest = chunks[name].model_copy(update={"digests": digests})
            with pytest.raises(ValueError):
                store.get_slice(
                    digest,
                    Selection(rows=(0, 10)),
                    dict(infos, **{name: infos[name].model_copy(update={"chunks": wrong_digest})}),
                )


class StoredChunksTests:
    """`StoredChunks` (over a store that can also write the blobs it locates)."""

    def test_located_chunks_are_the_stored_chunks(self, store: BlobStore) -> None:
        """What `locate` + `read_located` give (the chunk wire format's body) decodes to exactly the chunks the
        selection needs, each matching its write-time digest."""
        written = tensors(tokens=300)
        digest = content_hash(written)
        chunks = store.put_if_absent(digest, written).chunks
        infos = {t.name: TensorInfo(dtype=t.dtype, shape=list(t.shape), chunks=chunks[t.name]) for t in written}
        located = store.locate(digest, Selection(rows=(70, 201), axis1={"hidden_states": (2, 0)}), infos)
        assert located is not None and sorted(located) == sorted(infos)
        for name, where in located.items():
            data = b"".join(bytes(piece) for piece in store.read_located(digest, name, where.chunks))
            assert len(data) == sum(length for _, _, length in where.chunks)
            offset = 0
            for at, _, length in where.chunks:
                stored = data[offset : offset + length]
                offset += length
                assert crc_ok(stored)
                block = np.frombuffer(Blosc().decode(stored[:-4]), dtype=np.uint8)
                assert chunks[name].matches(at, block)
        hidden = infos["hidden_states"]
        per_row = hidden.shape[1]  # chunks are one layer wide: a grid row holds one chunk per layer
        rows = {at // per_row for at, _, _ in located["hidden_states"].chunks}
        assert hidden.chunks is not None
        tokens = hidden.chunks.shape[0]
        assert rows == set(range(70 // tokens, 200 // tokens + 1))  # only the chunk rows the tokens touch
        assert {at % per_row for at, _, _ in located["hidden_states"].chunks} == {0, 2}  # only the layers asked
        with pytest.raises(KeyError):
            store.locate("sha256:" + "0" * 64, Selection(), infos)


class DocumentsTests:
    """`Documents`: manifests and dataset indexes, idempotent by name."""

    def test_dataset_indexes(self, store: Documents) -> None:
        assert store.read_dataset("ab" * 32) is None and store.dataset_size("ab" * 32) is None
        pieces: list[bytes | memoryview] = [b"HSDS ", memoryview(b"one")]
        store.put_dataset("ab" * 32, iter(pieces))  # pieces, read once
        store.put_dataset("ab" * 32, [b"HSDS one"])
        assert store.read_dataset("ab" * 32) == b"HSDS one" and store.dataset_size("ab" * 32) == 8
        assert store.read_dataset("ab" * 32, 5) == b"one" and store.read_dataset("ab" * 32, 1, 3) == b"SDS"

    def test_manifest_documents(self, store: Documents) -> None:
        store.put_manifest("ab" * 32, b'{"a": 1}')
        store.put_manifest("ab" * 32, b'{"a": 1}')
        store.put_manifest("cd" * 32, b'{"b": 2}')
        assert sorted(store.iter_manifests()) == [("ab" * 32, b'{"a": 1}'), ("cd" * 32, b'{"b": 2}')]


class BlobStoreTests(BlobsTests, StoredChunksTests, DocumentsTests):
    """The whole suite, for an engine that is all three."""
