"""What `FeatureClient.get` returns: tensors (torch views on first use) over the received bytes, verified, with
their manifest."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from client.errors import IntegrityError
from schemas import safetensors_body
from schemas.content_hash import content_hash
from schemas.featureset import LayerId
from schemas.http import MalformedBody
from schemas.manifest import HIDDEN_SCALES, HIDDEN_STATES, TOPK_IDS, TOPK_LOGPROBS, TOPK_MASS, Manifest
from schemas.tensors import RawTensor

if TYPE_CHECKING:  # torch is imported on first use, so the CLI's commands that need no tensors start fast
    import torch

    from client.teacher import TopK


def _torch(tensor: RawTensor) -> torch.Tensor:
    from compute.tensors import to_torch

    return to_torch(tensor)


@dataclass(frozen=True)
class Features:
    manifest: Manifest
    tensors: dict[str, RawTensor]
    layers: list[LayerId]  # the layers served, in order along axis 1 of hidden_states
    tokens: tuple[int, int]  # the token range served, half-open

    @property
    def hidden_states(self) -> torch.Tensor:
        """[T, n_layers, H] bfloat16 (an fp8 featureset's dequantised here: `fp8` gives the stored values)."""
        if HIDDEN_SCALES in self.tensors:
            from compute.fp8 import dequantise

            return dequantise(*self.fp8)
        return _torch(self.tensors[HIDDEN_STATES])

    @property
    def fp8(self) -> tuple[torch.Tensor, torch.Tensor]:
        """An fp8 featureset's hidden states as stored: float8_e4m3fn [T, n_layers, H] and float32 scales [T, n_layers]
        (value = fp8 * scale; `compute.fp8`). ValueError for a bfloat16 featureset."""
        if HIDDEN_SCALES not in self.tensors:
            raise ValueError(f"featureset {self.manifest.featureset_id} stores {self.manifest.featureset.dtype}")
        return _torch(self.tensors[HIDDEN_STATES]), _torch(self.tensors[HIDDEN_SCALES])

    @property
    def teacher(self) -> TopK | None:
        """A `top_k` featureset's next-token distribution of the target (`client.teacher` says how to normalise)."""
        if TOPK_IDS not in self.tensors:
            return None
        from client.teacher import TopK

        ids = _torch(self.tensors[TOPK_IDS]).long()
        return TopK(ids, _torch(self.tensors[TOPK_LOGPROBS]), _torch(self.tensors[TOPK_MASS]))

    @property
    def input_ids(self) -> torch.Tensor:
        return _torch(self.tensors["input_ids"])

    @property
    def target_ids(self) -> torch.Tensor | None:
        return _torch(self.tensors["target_ids"]) if "target_ids" in self.tensors else None

    @property
    def loss_mask(self) -> torch.Tensor | None:
        return _torch(self.tensors["loss_mask"]) if "loss_mask" in self.tensors else None

    @property
    def content_hash(self) -> str:
        return self.manifest.content_hash

    @property
    def full(self) -> bool:
        """True when every layer and token of the entry was served (the content hash then covers it)."""
        m = self.manifest
        return safetensors_body.covers_whole(list(m.featureset.layers), m.num_tokens, self.layers, self.tokens)


def decode_verified(
    body: bytes | bytearray | memoryview | mmap.mmap, by_chunks: Callable[[Features], bool] | None = None
) -> Features:
    """Parse a features body and check its hash: the entry's content hash for a full read, else the served hash
    the service computed over the slice it read (whose chunks it checked against their crc32c). `by_chunks` may
    check a full entry against its write-time chunk digests instead (True when it did)."""
    try:
        decoded = safetensors_body.decode(body)
        manifest = Manifest.model_validate_json(decoded.metadata["manifest"])
        served = safetensors_body.parse_served(decoded.metadata)
    except (MalformedBody, KeyError, ValueError) as exc:
        raise IntegrityError(f"malformed features body: {exc}") from None
    features = Features(manifest, decoded.tensors, served.layers, served.tokens)
    if by_chunks is not None and features.full and by_chunks(features):
        return features
    actual = content_hash(decoded.tensors.values())
    expected = manifest.content_hash if features.full else served.content_hash
    if actual != expected:
        raise IntegrityError(f"received tensors hash to {actual}, expected {expected}")
    return features
