"""A stored chunk's frame is unpacked by one function for client and service: every codec a store writes (numcodecs'
C-Blosc1 frames) comes back bit for bit through blosc2, and anything else is a StoredChunkError, never other bytes."""

import numpy as np
import pytest
from numcodecs import Blosc

from schemas.chunks import crc32c
from schemas.codecs import StoreCodec
from schemas.stored_chunk import StoredChunkError, chunk_bytes
from service.storage.shard_writer import blosc_for


def _chunk() -> np.ndarray:
    """A bf16-like chunk (uint16 patterns of normal values with a few outlier channels), 64 tokens x 1 x 256."""
    values = np.random.default_rng(0).standard_normal((64, 1, 256)).astype(np.float32)
    values[..., :4] *= 20
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def _frame(chunk: np.ndarray, codec: StoreCodec) -> bytes:
    encoded = blosc_for(codec).encode(np.ascontiguousarray(chunk))
    return encoded + crc32c(encoded)


@pytest.mark.parametrize("codec", list(StoreCodec))
def test_every_codec_unpacks_to_the_bytes_numcodecs_decodes(codec: StoreCodec) -> None:
    chunk = _chunk()
    frame = _frame(chunk, codec)
    reference = np.frombuffer(Blosc().decode(frame[:-4]), dtype=np.uint8)
    out = np.full(chunk.nbytes + 64, 0xAB, dtype=np.uint8)  # a scratch larger than the chunk, as the pool's are
    got = chunk_bytes(memoryview(frame), chunk.nbytes, out)
    assert got.tobytes() == reference.tobytes() == chunk.tobytes()
    assert chunk_bytes(memoryview(frame), chunk.nbytes).tobytes() == chunk.tobytes()  # no scratch: an array of its own


def test_a_stored_chunk_is_a_view_of_the_frame_not_a_copy() -> None:
    chunk = _chunk()
    frame = bytearray(_frame(chunk, StoreCodec.UNCOMPRESSED))
    got = chunk_bytes(memoryview(frame), chunk.nbytes)
    assert np.shares_memory(got, np.frombuffer(frame, dtype=np.uint8))


@pytest.mark.parametrize("codec", list(StoreCodec))
def test_damaged_or_foreign_frames_are_refused(codec: StoreCodec) -> None:
    chunk = _chunk()
    frame = _frame(chunk, codec)
    flipped = bytearray(frame)
    flipped[len(frame) // 2] ^= 0x01
    with pytest.raises(StoredChunkError, match="crc32c"):
        chunk_bytes(memoryview(flipped), chunk.nbytes)
    with pytest.raises(StoredChunkError, match="one 65536-byte chunk"):  # another chunk's size than the array's
        chunk_bytes(memoryview(frame), chunk.nbytes * 2)
    with pytest.raises(StoredChunkError, match="one"):
        chunk_bytes(memoryview(frame[:-10] + crc32c(frame[:-10])), chunk.nbytes)  # cut short, crc32c made anew
    # a frame whose header is intact and crc32c made anew but whose compressed bytes were damaged: refused when
    # blosc cannot decode it; when it can, the bytes differ and the chunk's digest is what catches it (tested
    # on every read path in the client's and the service's suites)
    if codec is not StoreCodec.UNCOMPRESSED:
        body = bytearray(frame[:-4])
        body[16:] = bytes(len(body) - 16)
        try:
            got = chunk_bytes(memoryview(bytes(body) + crc32c(body)), chunk.nbytes)
        except StoredChunkError as exc:
            assert "decode" in str(exc)
        else:
            assert got.tobytes() != chunk.tobytes()
