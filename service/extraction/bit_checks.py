"""Whether a faster way of running a forward keeps its bits, here: right-padded batches and the fused elementwise
forwards each run only once probe sequences have been through every layer with and without them and every bit
matched, and batches only on device kinds where that is proven per kind (never the CPU)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from schemas.backend import Backend
from schemas.featureset import FINAL_NORM, FeatureSet
from service.extraction.batching import plan_batches
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel

log = logging.getLogger("hsstore.extraction")
# Device kinds where right-padded batches may run at all (after their probe). Not the CPU: on one EPYC host the probe
# passed and real requests' batched bits still differed from one-by-one extraction, so the audit failed them.
BATCHING_DEVICES = frozenset({"cuda"})


@dataclass(frozen=True, slots=True)
class TokenSequence:
    """One row of a forward: its token ids (prompt, then completion)."""

    ids: list[int]
    prompt_tokens: int
    completion_source: str | None


# rows, featureset, fused forwards or None -> [B, T, n_layers, H] hidden states and per row its heads
Forward = Callable[[list[TokenSequence], FeatureSet, FusedForwards | None], tuple[torch.Tensor, list]]


class BitChecks:
    """Each probe runs once per budget or backend, on the caller's thread, under the extractor's lock and kernels."""

    def __init__(self, loaded: LoadedModel, forward: Forward, fuse: bool) -> None:
        self.loaded = loaded
        self.forward = forward
        self.fuse = fuse
        self._calibrated: dict[tuple[int, Backend], int] = {}
        self._fused: FusedForwards | None = None
        self._fusion_checked: dict[Backend, bool] = {}

    def batch_budget(self, requested: int, backend: Backend) -> int:
        """Batching may only change how fast, never the bits. A probe on a few shapes proves nothing for the shapes
        a real request brings, so right-padded batches never run where they are not proven per device kind: on the
        CPU (a development device) never, whatever a probe finds. Elsewhere, the first time a budget is asked for,
        probe sequences run alone and batched through every layer; if any bit differs, batching stays off."""
        if requested <= 0 or self.loaded.device.type not in BATCHING_DEVICES:
            return 0
        if (requested, backend) not in self._calibrated:
            keeps_bits = self._batching_keeps_bits(requested)
            if not keeps_bits:
                log.warning(
                    "batches of %d tokens change bits on %s (%s): extracting one sequence per forward",
                    requested,
                    self.loaded.device,
                    backend.value,
                )
            self._calibrated[(requested, backend)] = requested if keeps_bits else 0
        return self._calibrated[(requested, backend)]

    def fusion(self, backend: Backend) -> FusedForwards | None:
        """The fused forwards, once probe sequences gave every layer the eager bits with them under `backend`."""
        if not self.fuse:
            return None
        if backend not in self._fusion_checked:
            if self._fused is None and not self._fusion_checked:
                self._fused = FusedForwards.for_model(self.loaded.model, self.loaded.device)
            keeps_bits = self._fused is not None and self._fusion_keeps_bits(self._fused)
            if self._fused is not None and not keeps_bits:
                log.warning(
                    "fused elementwise forwards change bits on %s (%s): running eager",
                    self.loaded.device,
                    backend.value,
                )
            self._fusion_checked[backend] = keeps_bits
        return self._fused if self._fusion_checked[backend] else None

    def _fusion_keeps_bits(self, fused: FusedForwards) -> bool:
        every_layer = FeatureSet(layers=[*range(self.loaded.num_layers), FINAL_NORM])
        for probe in self._probes((300, 1000)):
            eager, _ = self.forward([probe], every_layer, None)
            with_fusion, _ = self.forward([probe], every_layer, fused)
            if not torch.equal(eager, with_fusion):
                return False
        return True

    def _probes(self, lengths: Sequence[int]) -> list[TokenSequence]:
        generator = torch.Generator().manual_seed(0)
        vocab = int(self.loaded.config.vocab_size)
        return [TokenSequence(torch.randint(0, vocab, (n,), generator=generator).tolist(), n, None) for n in lengths]

    def _batching_keeps_bits(self, budget: int) -> bool:
        lengths = [n for n in (17, 129, 300, 1000, 1023) if 2 * n <= budget] or [1]
        probes = self._probes(lengths)
        every_layer = FeatureSet(layers=list(range(self.loaded.num_layers)))
        alone = [self.forward([probe], every_layer, None)[0][0] for probe in probes]
        for batch in plan_batches(lengths, budget):
            together, _ = self.forward([probes[i] for i in batch], every_layer, None)
            for row, index in enumerate(batch):
                if not torch.equal(together[row, : lengths[index]], alone[index]):
                    return False
        return True
