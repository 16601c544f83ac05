"""A batch whose response has begun cannot change its status: an entry that fails then gets an error frame, the rest
of the batch still arrives, and the client raises its typed error naming the key."""

from __future__ import annotations

import httpx
import pytest

from client import FeatureClient, IntegrityError
from schemas import batch_frames
from schemas.http import BODY_FORMATS, ERROR_FRAME, BodyFormat
from service.settings import Settings

SAFETENSORS_KIND = BODY_FORMATS[BodyFormat.SAFETENSORS].frame_kind


def test_a_corrupt_entry_in_a_batch_is_an_error_frame(
    client: FeatureClient, http: httpx.Client, settings: Settings
) -> None:
    samples = [{"text": f"frame {i} " * 10} for i in range(3)]
    manifests = [r.manifest for r in client.extract(samples).results]
    middle = manifests[1].content_hash.removeprefix("sha256:")
    shard = next(
        p
        for p in (settings.data_dir / "blobs" / middle[:2] / middle / "hidden_states").rglob("*")
        if p.is_file() and p.name != "zarr.json"
    )
    raw = bytearray(shard.read_bytes())
    raw[40] ^= 0xFF  # a chunk's bytes, caught by its crc32c only when read: after the 200 went out
    shard.write_bytes(raw)

    keys = [{"prompt_hash": m.prompt_hash} for m in manifests]
    response = http.post("/v1/features:batch", json={"keys": keys})
    assert response.status_code == 200
    frames = batch_frames.split_frames(response.content)
    assert [f.kind for f in frames] == [SAFETENSORS_KIND, ERROR_FRAME, SAFETENSORS_KIND]
    assert b'"corrupt_entry"' in bytes(frames[1].body)
    with pytest.raises(IntegrityError, match=r"keys\[1\].*damaged"):
        FeatureClient(http=client._http, wire_format="safetensors").get_batch(keys)
    # sent as stored chunks, the damaged chunk reaches the client, which refuses it naming the key
    with pytest.raises(IntegrityError, match=r"keys\[1\].*crc32c"):
        client.get_batch(keys)
    assert [f.content_hash for f in client.get_batch([keys[0], keys[2]])] == [
        manifests[0].content_hash,
        manifests[2].content_hash,
    ]  # the connection and the other entries are fine
