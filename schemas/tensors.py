"""Raw tensors as the contract sees them: a name, a dtype name, a shape and little-endian bytes.

The service and the client convert torch tensors to and from this form here, so content hashing and the wire format
never depend on torch internals. bf16 and fp8 have no numpy dtype: they travel as their raw bit patterns.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from math import prod

import numpy as np

# dtype name -> (item size, numpy dtype holding the same bytes, safetensors name)
DTYPES: dict[str, tuple[int, str, str]] = {
    "bfloat16": (2, "<u2", "BF16"),
    "float16": (2, "<f2", "F16"),
    "float32": (4, "<f4", "F32"),
    "int32": (4, "<i4", "I32"),
    "int64": (8, "<i8", "I64"),
    "uint8": (1, "u1", "U8"),
    "uint16": (2, "<u2", "U16"),
    "float8_e4m3fn": (1, "u1", "F8_E4M3"),  # no numpy dtype either: its 1-byte patterns
}
SAFETENSORS_TO_DTYPE = {st: name for name, (_, _, st) in DTYPES.items()}

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("hsstore assumes a little-endian host")


@dataclass(frozen=True, slots=True)
class RawTensor:
    """One named tensor; `data` is C-contiguous little-endian bytes (a memoryview or bytes, never copied here)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: memoryview

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {self.dtype!r}")
        expected = prod(self.shape) * DTYPES[self.dtype][0]
        if self.data.nbytes != expected:
            raise ValueError(
                f"{self.name}: {self.data.nbytes} bytes for shape {self.shape} {self.dtype} (want {expected})"
            )

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def numpy(self) -> np.ndarray:
        """A zero-copy numpy view (bf16 as uint16 bit patterns)."""
        return np.frombuffer(self.data, dtype=DTYPES[self.dtype][1]).reshape(self.shape)

    @classmethod
    def from_numpy(cls, name: str, dtype: str, array: np.ndarray) -> RawTensor:
        array = np.ascontiguousarray(array, dtype=DTYPES[dtype][1])
        return cls(name, dtype, tuple(int(d) for d in array.shape), byte_view(array))


def byte_view(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, without a copy (also for empty arrays, which memoryview cannot cast)."""
    return memoryview(array.reshape(-1).view(np.uint8))


@dataclass(frozen=True, slots=True)
class TensorLayout:
    """A tensor's name, dtype and shape without its bytes: enough to lay out a header before reading anything."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * DTYPES[self.dtype][0]
