"""Per-layer summary statistics, and the refusal of tensors with NaN or Inf."""

from __future__ import annotations

import torch

from schemas.featureset import LayerId
from schemas.manifest import LayerStats
from service.errors import NonFiniteFeatures


def layer_stats(hidden_states: torch.Tensor, layers: list[LayerId], label: str) -> list[LayerStats]:
    """`hidden_states` [T, n_layers, H]; raises NonFiniteFeatures naming the first bad layer."""
    values = hidden_states.float()
    finite = torch.isfinite(values).all(dim=2).all(dim=0)
    if not bool(finite.all()):
        bad = [layers[i] for i in range(len(layers)) if not bool(finite[i])]
        raise NonFiniteFeatures(f"{label}: layers {bad} hold NaN or Inf; nothing was stored")
    means = values.mean(dim=(0, 2))
    stds = values.std(dim=(0, 2), correction=0)
    absmax = values.abs().amax(dim=(0, 2))
    return [
        LayerStats(layer=layer, mean=float(means[i]), std=float(stds[i]), absmax=float(absmax[i]))
        for i, layer in enumerate(layers)
    ]
