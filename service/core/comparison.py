"""Per-layer agreement of two extractions of the same tokens (seed 004's dual-eval experiment as a function)."""

from __future__ import annotations

import torch

from schemas.api import LayerComparison
from schemas.featureset import LayerId
from schemas.tensors import RawTensor
from schemas.torch_tensors import to_torch


def compare_hidden_states(a: RawTensor, b: RawTensor, layers: list[LayerId]) -> list[LayerComparison]:
    """Both [T, n_layers, H] bf16. Cosine per token, then mean/min over tokens; max |a-b|; bitwise-equal fraction."""
    bits_a, bits_b = to_torch(a).view(torch.int16), to_torch(b).view(torch.int16)
    out = []
    for position, layer in enumerate(layers):
        x, y = to_torch(a)[:, position].float(), to_torch(b)[:, position].float()
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
