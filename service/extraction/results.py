"""An extraction's results: labelled before its tensors reach the host (`Labels`), waited for from any thread
(`PendingExtraction`), and complete (`Extraction`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compute.tensors import from_torch
from schemas.backend import Fingerprint
from schemas.featureset import LayerId
from schemas.manifest import LayerStats
from schemas.tensors import RawTensor
from service.extraction.stats import RowCounts, layer_stats, row_counts


@dataclass(frozen=True, slots=True)
class Extraction:
    tensors: list[RawTensor]
    layer_stats: list[LayerStats]
    rows: list[RowCounts]  # per layer: what the content checks judge of its rows
    fingerprint: Fingerprint
    prompt_tokens: int
    completion_tokens: int
    completion_source: str | None


@dataclass(frozen=True, slots=True)
class Labels:
    """What an extraction is, known before its tensors reach the host."""

    layers: list[LayerId]
    label: str
    fingerprint: Fingerprint
    prompt_tokens: int
    completion_tokens: int
    completion_source: str | None


class PendingExtraction:
    """An extraction whose tensors may still be on their way to host memory; `wait()` from any thread. The layer
    summary comes with them, so a NaN or Inf is refused (NonFiniteFeatures) here, before anything is stored."""

    def __init__(
        self,
        host: dict[str, torch.Tensor],
        summary: torch.Tensor,
        done: torch.cuda.Event | None,
        labels: Labels,
        forward: int,
    ) -> None:
        self.forward = forward  # which forward of its `extract_many` produced it (they share one per pack or batch)
        self._host = host
        self._summary = summary
        self._done = done
        self._labels = labels

    def wait(self) -> Extraction:
        if self._done is not None:
            self._done.synchronize()
        labels = self._labels
        return Extraction(
            tensors=[from_torch(name, tensor) for name, tensor in self._host.items()],
            layer_stats=layer_stats(self._summary, labels.layers, labels.label),
            rows=row_counts(self._summary),
            fingerprint=labels.fingerprint,
            prompt_tokens=labels.prompt_tokens,
            completion_tokens=labels.completion_tokens,
            completion_source=labels.completion_source,
        )
