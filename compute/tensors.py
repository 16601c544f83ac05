"""torch <-> RawTensor without copies where torch allows it, for (de)serialisation: the service, the client and the
importer convert through it."""

from __future__ import annotations

import warnings

import torch

from schemas.tensors import RawTensor, byte_view

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float8_e4m3fn": torch.float8_e4m3fn,
}
_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


def from_torch(name: str, tensor: torch.Tensor) -> RawTensor:
    """A CPU tensor's bytes as a RawTensor (bf16 and fp8 read as their bit patterns)."""
    if tensor.dtype not in _NAMES:
        raise ValueError(f"{name}: unsupported dtype {tensor.dtype}")
    tensor = tensor.detach().to("cpu").contiguous()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        flat = tensor.view(torch.int16)
    elif tensor.dtype == torch.float8_e4m3fn:
        flat = tensor.view(torch.uint8)
    else:
        flat = tensor
    return RawTensor(name, _NAMES[tensor.dtype], tuple(tensor.shape), byte_view(flat.numpy()))


def to_torch(raw: RawTensor) -> torch.Tensor:
    """A torch view over the RawTensor's buffer (read-only buffers are shared, not copied; do not write to them)."""
    dtype = TORCH_DTYPES[raw.dtype]
    if raw.nbytes == 0:
        return torch.empty(raw.shape, dtype=dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        tensor = torch.frombuffer(raw.data, dtype=dtype).reshape(raw.shape)
    # safetensors packs tensors without padding: a small int tensor after an odd-length one can sit unaligned
    return tensor if tensor.data_ptr() % tensor.element_size() == 0 else tensor.clone()
