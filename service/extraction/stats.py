"""Per-layer summary statistics, and the refusal of tensors with NaN or Inf."""

from __future__ import annotations

import torch

from schemas.featureset import LayerId
from schemas.manifest import LayerStats
from service.errors import NonFiniteFeatures


def layer_stats(hidden_states: torch.Tensor, layers: list[LayerId], label: str) -> list[LayerStats]:
    """`hidden_states` [T, n_layers, H]; raises NonFiniteFeatures naming the bad layers. One device sync; one
    layer at a time in float32, so the extra memory is one layer's, not the whole tensor's."""
    rows = []
    for position in range(hidden_states.shape[1]):
        values = hidden_states[:, position].float()
        rows.append(
            torch.stack(
                [values.mean(), values.std(correction=0), values.abs().amax(), torch.isfinite(values).all().float()]
            )
        )
    summary = torch.stack(rows).tolist()
    bad = [layer for layer, row in zip(layers, summary, strict=True) if row[3] != 1.0]
    if bad:
        raise NonFiniteFeatures(f"{label}: layers {bad} hold NaN or Inf; nothing was stored")
    return [
        LayerStats(layer=layer, mean=row[0], std=row[1], absmax=row[2])
        for layer, row in zip(layers, summary, strict=True)
    ]
