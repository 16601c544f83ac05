"""Per-layer agreement of two extractions of the same tokens (seed 004's dual-eval experiment as a function)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from compute.fp8 import dequantise
from compute.tensors import to_torch
from schemas.checks_api import LayerComparison
from schemas.featureset import LayerId
from schemas.manifest import HIDDEN_SCALES, HIDDEN_STATES
from schemas.tensors import RawTensor


def _values(tensors: Mapping[str, RawTensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the stored bits as integers, the values as float32), both [T, n_layers, H]; fp8 dequantised."""
    stored = to_torch(tensors[HIDDEN_STATES])
    if HIDDEN_SCALES in tensors:
        return stored.view(torch.uint8), dequantise(stored, to_torch(tensors[HIDDEN_SCALES]), torch.float32)
    return stored.view(torch.int16), stored.float()


def compare_hidden_states(
    a: Mapping[str, RawTensor], b: Mapping[str, RawTensor], layers: list[LayerId]
) -> list[LayerComparison]:
    """Two entries' tensors, of one featureset. Cosine per token, then mean/min over tokens; max |a-b|;
    bitwise-equal fraction of the stored values."""
    (bits_a, values_a), (bits_b, values_b) = _values(a), _values(b)
    out = []
    for position, layer in enumerate(layers):
        x, y = values_a[:, position], values_b[:, position]
        cosine = torch.nn.functional.cosine_similarity(x, y, dim=-1, eps=1e-12)
        out.append(
            LayerComparison(
                layer=layer,
                cosine_mean=float(cosine.mean()),
                cosine_min=float(cosine.min()),
                max_abs_diff=float((x - y).abs().max()),
                bitwise_equal_fraction=float((bits_a[:, position] == bits_b[:, position]).float().mean()),
            )
        )
    return out
