"""The chunk wire format end to end against a live server: bit-equal to safetensors and to the store for full reads,
layer and token slices and batches; every flipped byte refused; entries from before it (other digests, another
codec, no digests at all) still read."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from client import FeatureClient, IntegrityError
from client.receive import decode_chunks
from schemas import chunk_body
from schemas.chunks import crc32c, digests_of, entry_digest
from schemas.codecs import StoreCodec
from schemas.http import BODY_FORMATS, BodyFormat
from schemas.manifest import Manifest
from service.settings import Settings

CHUNKS_MEDIA_TYPE = BODY_FORMATS[BodyFormat.CHUNKS].media_type

LAYERS = ["embed", 1, 2, 3]
READS = [
    {},
    {"layers": [2]},
    {"layers": [3, "embed"]},  # out of stored order
    {"tokens": (5, 37)},  # across chunk edges
    {"tokens": (40, None)},
    {"layers": [1, 3], "tokens": (16, 32)},  # exactly one chunk row
]


@pytest.fixture(params=[StoreCodec.LZ4_BITSHUFFLE, StoreCodec.UNCOMPRESSED])
def settings(tmp_path: Path, tiny_model_dir: Path, request: pytest.FixtureRequest) -> Settings:
    # small chunks: every read crosses several, and slices start and end inside them; each written compressed and
    # as it is (the client checks a stored-as-is chunk where it lies)
    return Settings(
        data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", chunk_tokens=16, codec=request.param
    )


@pytest.fixture
def entries(client: FeatureClient) -> list[Manifest]:
    samples = [{"id": f"w{i}", "text": "def wire(x): return x * 2  # " * (3 + 4 * i)} for i in range(3)]
    return [r.manifest for r in client.extract(samples, featureset=LAYERS).results]


def _arrays(features) -> dict[str, bytes]:
    return {name: bytes(t.data) for name, t in features.tensors.items()}


def _raw_chunk_body(client: FeatureClient, manifest: Manifest, **params: str) -> bytes:
    response = client._http.get(
        f"/v1/features/{manifest.prompt_hash}", params=params, headers={"accept": CHUNKS_MEDIA_TYPE}
    )
    assert response.status_code == 200 and response.headers["content-type"] == CHUNKS_MEDIA_TYPE
    assert int(response.headers["content-length"]) == len(response.content)
    return response.content


@pytest.mark.parametrize("verify", ["chunks", "full"])
def test_every_wire_format_reads_the_same_bits(live_url: str, entries: list[Manifest], verify: str) -> None:
    with (
        FeatureClient(live_url, verify=verify) as chunked,
        FeatureClient(live_url, wire_format="safetensors") as safetensors,
    ):
        assert chunked.wire_format == "chunks"
        for manifest in entries:
            for read in READS:
                a = chunked.fetch(manifest.feature_key(), **read)
                b = safetensors.fetch(manifest.feature_key(), **read)
                assert _arrays(a) == _arrays(b), read
                assert (a.layers, a.tokens, a.full) == (b.layers, b.tokens, b.full), read
                assert a.manifest.content_hash == manifest.content_hash
        items = [{"prompt_hash": m.prompt_hash, **read} for m in entries for read in READS[:4]]
        batch = chunked.get_batch(items)
        assert [_arrays(f) for f in batch] == [_arrays(f) for f in safetensors.get_batch(items)]
        assert [_arrays(f) for f in batch] == [_arrays(f) for f in chunked.get_many(items)]


def test_full_read_equals_the_stored_entry(client: FeatureClient, app, entries: list[Manifest]) -> None:
    store = app.state.services.store
    for manifest in entries:
        stored = {name: bytes(t.data) for name, t in store.get(manifest.content_hash).items()}
        assert _arrays(client.fetch(manifest.feature_key())) == stored


def test_head_announces_the_chunk_body_length(client: FeatureClient, entries: list[Manifest]) -> None:
    manifest = entries[1]
    body = _raw_chunk_body(client, manifest, layers="1,3", tokens="3:40")
    head = client._http.head(
        f"/v1/features/{manifest.prompt_hash}",
        params={"layers": "1,3", "tokens": "3:40"},
        headers={"accept": CHUNKS_MEDIA_TYPE},
    )
    assert head.headers["content-type"] == CHUNKS_MEDIA_TYPE
    assert int(head.headers["content-length"]) == len(body)


def test_a_flipped_byte_anywhere_is_refused(client: FeatureClient, entries: list[Manifest]) -> None:
    manifest = entries[2]
    for params in ({}, {"layers": "3", "tokens": "7:41"}):
        body = _raw_chunk_body(client, manifest, **params)
        header, _, data_start = chunk_body.decode_header(memoryview(body))
        decode_chunks(body)  # as sent: accepted
        # every byte of the prefix, header and index; and bytes at the start, middle and end of every chunk
        positions = list(range(data_start))
        for array in header.arrays:
            for _, offset, length, _ in array.chunks:
                start = data_start + offset
                positions += [start, start + length // 2, start + length - 5, start + length - 1]
        for position in positions:
            flipped = bytearray(body)
            flipped[position] ^= 0x01
            with pytest.raises(IntegrityError):
                decode_chunks(flipped)
        with pytest.raises(IntegrityError):
            decode_chunks(body[:-1])  # cut short
        with pytest.raises(IntegrityError):
            decode_chunks(body + b"\0")  # overlong


def _with_header(body: bytes, change) -> bytes:
    """The body with its header changed by `change` and a valid crc32c: a consistent header that lies."""
    header, _, data_start = chunk_body.decode_header(memoryview(body))
    return chunk_body.encode_header(change(header)) + body[data_start:]


def test_an_index_that_lies_is_refused_even_with_a_valid_header_checksum(
    client: FeatureClient, entries: list[Manifest]
) -> None:
    body = _raw_chunk_body(client, entries[2], tokens="0:40")

    def hidden(header: chunk_body.ChunkHeader) -> tuple[int, chunk_body.SentArray]:
        return next((i, a) for i, a in enumerate(header.arrays) if a.name == "hidden_states")

    def edit(header: chunk_body.ChunkHeader, **update) -> chunk_body.ChunkHeader:
        index, array = hidden(header)
        arrays = list(header.arrays)
        arrays[index] = array.model_copy(update=update)
        return header.model_copy(update={"arrays": arrays})

    def swap_digest(h):
        chunks = list(hidden(h)[1].chunks)
        at, offset, length, _ = chunks[0]
        chunks[0] = (at, offset, length, chunks[1][3])
        return edit(h, chunks=chunks)

    def drop_chunk(h):
        return edit(h, chunks=hidden(h)[1].chunks[1:])

    def shift_offset(h):
        chunks = list(hidden(h)[1].chunks)
        at, offset, length, digest = chunks[1]
        chunks[1] = (at, offset + 1, length, digest)
        return edit(h, chunks=chunks)

    def other_rows(h):
        return edit(h, rows=(0, 39))

    def other_manifest(h):
        manifest = Manifest.model_validate_json(h.manifest)
        tensors = dict(manifest.tensors)
        info = tensors["hidden_states"]
        digests = list(info.chunks.digests)
        digests[0] = "0" * 32
        tensors["hidden_states"] = info.model_copy(
            update={"chunks": info.chunks.model_copy(update={"digests": digests})}
        )
        return h.model_copy(update={"manifest": manifest.model_copy(update={"tensors": tensors}).model_dump_json()})

    for change in (swap_digest, drop_chunk, shift_offset, other_rows, other_manifest):
        with pytest.raises(IntegrityError):
            decode_chunks(_with_header(body, change))


def test_entries_from_before_the_chunk_format_still_read(live_url: str, app, entries: list[Manifest]) -> None:
    manifest = entries[0]
    tensors = app.state.services.store.get(manifest.content_hash)

    def relisted(revision: str, update: dict) -> Manifest:
        old = manifest.model_copy(update={"model_revision": revision, "seq": None, **update})
        app.state.services.versions.add(old)
        return old

    # sha256 chunk digests, as the first entries with digests were written
    sha = {
        n: t.model_copy(update={"chunks": digests_of(tensors[n].numpy(), tuple(t.chunks.shape), "sha256-128")})
        for n, t in manifest.tensors.items()
    }
    with_sha = relisted(
        "sha256:" + "5" * 64, {"tensors": sha, "chunks_digest": entry_digest({n: t.chunks for n, t in sha.items()})}
    )
    # no chunk digests at all: served as safetensors, checked by its content hash
    bare = {n: t.model_copy(update={"chunks": None}) for n, t in manifest.tensors.items()}
    without = relisted("sha256:" + "6" * 64, {"tensors": bare, "chunks_digest": None})
    expected = _arrays(FeatureClient(live_url, wire_format="safetensors").fetch(manifest.feature_key()))
    with FeatureClient(live_url) as client:
        for old in (with_sha, without):
            assert _arrays(client.fetch(old.feature_key())) == expected
            assert _arrays(client.fetch(old.feature_key(), layers=[2], tokens=(3, 30))) == _arrays(
                client.fetch(manifest.feature_key(), layers=[2], tokens=(3, 30))
            )
        head = client._http.head(
            f"/v1/features/{without.prompt_hash}",
            params=without.feature_key().params(),
            headers={"accept": CHUNKS_MEDIA_TYPE},
        )
        assert head.headers["content-type"] == "application/octet-stream"


def test_blobs_of_another_codec_still_read(tmp_path: Path, tiny_model_dir: Path, tiny_loaded) -> None:
    """A store written with zstd (the default before the measurement) served by one set to lz4."""
    from service.main import create_app
    from tests.conftest import LiveServer

    data = tmp_path / "store"
    sample = {"text": "def old(): return 'zstd'\n" * 20}
    old = create_app(
        Settings(data_dir=data, model_dir=tiny_model_dir, device="cpu", codec=StoreCodec.ZSTD1_SHUFFLE), tiny_loaded
    )
    with LiveServer(old) as url, FeatureClient(url, wire_format="safetensors") as client:
        written = client.extract([sample], featureset=LAYERS).results[0].manifest
        expected = _arrays(client.fetch(written.feature_key()))
    new = create_app(Settings(data_dir=data, model_dir=tiny_model_dir, device="cpu"), tiny_loaded)
    with LiveServer(new) as url, FeatureClient(url) as client:
        assert new.state.services.settings.codec == StoreCodec.LZ4_BITSHUFFLE
        assert _arrays(client.fetch(written.feature_key())) == expected
        assert np.array_equal(
            client.fetch(written.feature_key(), layers=[3]).hidden_states.float().numpy(),
            client.fetch(written.feature_key()).hidden_states[:, 3:4].float().numpy(),
        )


def test_the_header_is_framed_as_documented(client: FeatureClient, entries: list[Manifest]) -> None:
    body = _raw_chunk_body(client, entries[0])
    magic, version, length = struct.unpack_from("<4sBI", body)
    assert (magic, version) == (b"HSCK", 1)
    assert crc32c(body[: 9 + length]) == body[9 + length : 13 + length]
