from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from compute.tensors import from_torch, to_torch
from schemas import safetensors_body
from schemas.content_hash import content_hash
from schemas.http import MalformedBody
from schemas.tensors import RawTensor


def sample_tensors() -> list[RawTensor]:
    torch.manual_seed(0)
    return [
        from_torch("hidden_states", torch.randn(7, 3, 5).to(torch.bfloat16)),
        from_torch("input_ids", torch.arange(7, dtype=torch.int32)),
        from_torch("loss_mask", torch.tensor([0, 0, 0, 1, 1, 1, 1], dtype=torch.uint8)),
    ]


def test_our_bodies_load_with_the_safetensors_library() -> None:
    body = safetensors_body.encode(sample_tensors(), {"manifest": "{}"})
    loaded = st_load(body)
    for tensor in sample_tensors():
        assert torch.equal(loaded[tensor.name], to_torch(tensor))


def test_safetensors_library_bodies_decode_with_ours() -> None:
    tensors = {t.name: to_torch(t).clone() for t in sample_tensors()}
    decoded = safetensors_body.decode(st_save(tensors, metadata={"k": "v"}))
    assert decoded.metadata == {"k": "v"}
    assert content_hash(decoded.tensors.values()) == content_hash(sample_tensors())


def test_hidden_states_start_aligned_and_every_tensor_decodes() -> None:
    body = bytearray(safetensors_body.encode(sample_tensors(), {"m": "x" * 13}))
    decoded = safetensors_body.decode(body)
    hidden = decoded.tensors["hidden_states"]
    assert (np.frombuffer(hidden.data, dtype=np.uint8).ctypes.data - np.frombuffer(body, np.uint8).ctypes.data) % 8 == 0
    for tensor in sample_tensors():
        assert torch.equal(to_torch(decoded.tensors[tensor.name]), to_torch(tensor))


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x01",
        b"\xff" * 8 + b"{}",
        b"\x02\x00\x00\x00\x00\x00\x00\x00[]",
        b"\x20\x00\x00\x00\x00\x00\x00\x00" + b'{"x":{"dtype":"BF16","shape":[4]}}',
    ],
)
def test_malformed_bodies_raise_wire_format_error(body: bytes) -> None:
    with pytest.raises(MalformedBody):
        safetensors_body.decode(body)


def test_content_hash_changes_with_any_bit() -> None:
    tensors = sample_tensors()
    flipped = bytearray(tensors[0].data)
    flipped[3] ^= 1
    changed = [RawTensor("hidden_states", "bfloat16", tensors[0].shape, memoryview(flipped)), *tensors[1:]]
    assert content_hash(changed) != content_hash(tensors)
    assert content_hash(tensors) == content_hash(list(reversed(tensors)))  # name order, not argument order
