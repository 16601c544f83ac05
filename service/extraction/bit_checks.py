"""Whether the fused elementwise forwards keep a forward's bits, here: they run only once their kernels gave the eager
bits on every bfloat16 input (service/model/fused.py) and probe sequences have been through every layer with and
without them, by the forward an unpacked extraction runs (alone.py), and every bit matched."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from compute.forward import ForwardPlan
from schemas.backend import Backend
from schemas.featureset import FINAL_NORM, FeatureSet
from service.extraction.alone import TokenSequence, forward_alone
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel

log = logging.getLogger("hsstore.extraction")


class BitChecks:
    """Each probe runs once per backend, on the caller's thread, under the extractor's lock and kernels."""

    def __init__(self, loaded: LoadedModel, fuse: bool) -> None:
        self.loaded = loaded
        self.fuse = fuse
        self._fused: FusedForwards | None = None
        self._fusion_checked: dict[Backend, bool] = {}

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

    def refusals(self) -> dict[Backend, str]:
        """The backends under which the fused forwards were asked for but changed bits here, and why not run."""
        refused = [b for b, keeps in self._fusion_checked.items() if not keeps and self._fused is not None]
        return {b: "the fused forwards changed bits on this device (their probe)" for b in refused}

    def _fusion_keeps_bits(self, fused: FusedForwards) -> bool:
        layers = self.loaded.num_layers
        every_layer = ForwardPlan.of(FeatureSet(layers=[*range(layers), FINAL_NORM]), layers)
        for probe in self._probes((300, 1000)):
            eager, _, _ = forward_alone(self.loaded, probe, every_layer)
            with_fusion, _, _ = forward_alone(self.loaded, probe, every_layer, fused)
            if not torch.equal(eager, with_fusion):
                return False
        return True

    def _probes(self, lengths: Sequence[int]) -> list[TokenSequence]:
        generator = torch.Generator().manual_seed(0)
        vocab = int(self.loaded.config.vocab_size)
        return [TokenSequence(torch.randint(0, vocab, (n,), generator=generator).tolist(), n, None) for n in lengths]
