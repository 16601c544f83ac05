"""The content hash that names an entry version; computed at write, verified at read and on receipt."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from schemas.tensors import RawTensor


def content_hash(tensors: Iterable[RawTensor]) -> str:
    """`sha256:` + sha256 over, per tensor in name order, `name|dtype|d0,d1,..\\n` then its raw little-endian bytes."""
    digest = hashlib.sha256()
    for tensor in sorted(tensors, key=lambda t: t.name):
        digest.update(f"{tensor.name}|{tensor.dtype}|{','.join(map(str, tensor.shape))}\n".encode())
        digest.update(tensor.data)
    return "sha256:" + digest.hexdigest()
