"""Per-layer summary statistics, the rows the content checks judge, and the refusal of tensors with NaN or Inf.

The summary is computed on the device and travels to the host with the features, so the extraction thread never
waits for the GPU; the refusal happens where the summary is read (`layer_stats`), before anything is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from schemas.featureset import LayerId
from schemas.manifest import LayerStats
from service.errors import NonFiniteFeatures


@dataclass(frozen=True, slots=True)
class RowCounts:
    """What the content checks judge of one layer's rows (tokens): how many hold one value throughout (all-zero
    rows among them), and how many repeat the row before although the token changed, which no causal model
    computes (one token's states copied to every position), of the `changed` rows whose token differs from the one
    before (the same for every layer of an entry)."""

    constant: int
    repeated: int
    changed: int


def layer_summary(hidden_states: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """`hidden_states` [T, n_layers, H] and the `input_ids` [T] (on its device) -> float32 [n_layers, 7]: mean, std,
    absmax, all-finite (1.0 or 0.0), constant, repeated and changed rows (`RowCounts`). One layer at a time in
    float32, so the extra memory is one layer's, not the whole tensor's; no device sync."""
    token_changed = input_ids[1:] != input_ids[:-1]
    changed = token_changed.sum().float()
    rows = []
    for position in range(hidden_states.shape[1]):
        values = hidden_states[:, position].float()
        constant = (values.amax(dim=-1) == values.amin(dim=-1)).sum().float()
        repeated = ((values[1:] == values[:-1]).all(dim=-1) & token_changed).sum().float()
        finite = torch.isfinite(values).all().float()
        stats = [values.mean(), values.std(correction=0), values.abs().amax(), finite, constant, repeated, changed]
        rows.append(torch.stack(stats))
    return torch.stack(rows)


def row_counts(summary: torch.Tensor) -> list[RowCounts]:
    """Per layer, its rows as the summary counted them."""
    return [RowCounts(int(row[4]), int(row[5]), int(row[6])) for row in summary.tolist()]


def layer_stats(summary: torch.Tensor, layers: list[LayerId], label: str) -> list[LayerStats]:
    """The summary as LayerStats; raises NonFiniteFeatures naming the layers that hold NaN or Inf."""
    rows = summary.tolist()
    bad = [layer for layer, row in zip(layers, rows, strict=True) if row[3] != 1.0]
    if bad:
        raise NonFiniteFeatures(f"{label}: layers {bad} hold NaN or Inf; nothing was stored")
    return [
        LayerStats(layer=layer, mean=row[0], std=row[1], absmax=row[2]) for layer, row in zip(layers, rows, strict=True)
    ]
