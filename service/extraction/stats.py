"""Per-layer summary statistics, and the refusal of tensors with NaN or Inf.

The summary is computed on the device and travels to the host with the features, so the extraction thread never
waits for the GPU; the refusal happens where the summary is read (`layer_stats`), before anything is stored.
"""

from __future__ import annotations

import torch

from schemas.featureset import LayerId
from schemas.manifest import LayerStats
from service.errors import NonFiniteFeatures


def layer_summary(hidden_states: torch.Tensor) -> torch.Tensor:
    """`hidden_states` [T, n_layers, H] -> float32 [n_layers, 5]: mean, std, absmax, all-finite (1.0 or 0.0), and
    how many of its rows (tokens) are constant. One layer at a time in float32, so the extra memory is one layer's,
    not the whole tensor's; no device sync."""
    rows = []
    for position in range(hidden_states.shape[1]):
        values = hidden_states[:, position].float()
        constant = (values.amax(dim=-1) == values.amin(dim=-1)).sum().float()
        finite = torch.isfinite(values).all().float()
        rows.append(torch.stack([values.mean(), values.std(correction=0), values.abs().amax(), finite, constant]))
    return torch.stack(rows)


def constant_rows(summary: torch.Tensor) -> list[int]:
    """Per layer, how many of its rows the summary found constant (all-zero rows among them)."""
    return [int(count) for count in summary[:, 4].tolist()]


def layer_stats(summary: torch.Tensor, layers: list[LayerId], label: str) -> list[LayerStats]:
    """The summary as LayerStats; raises NonFiniteFeatures naming the layers that hold NaN or Inf."""
    rows = summary.tolist()
    bad = [layer for layer, row in zip(layers, rows, strict=True) if row[3] != 1.0]
    if bad:
        raise NonFiniteFeatures(f"{label}: layers {bad} hold NaN or Inf; nothing was stored")
    return [
        LayerStats(layer=layer, mean=row[0], std=row[1], absmax=row[2]) for layer, row in zip(layers, rows, strict=True)
    ]
