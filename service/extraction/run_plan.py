"""How this device runs this model for one call, worked out once (the way `ForwardPlan` holds what is extracted): the
backend's kernels, the fused elementwise forwards where they keep the bits here, the pack policy as this card holds
it, the attention kernel, whether a pack's layers replay recordings, and the fingerprint these make. The extractor
builds one under its lock and the backend's kernels; everything below it reads the plan, not the request."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.backend import SPECS, AttentionKernel, Backend, Fingerprint
from schemas.batching import PackPolicy
from service.extraction.fingerprints import fingerprint_of
from service.extraction.memory_plan import MemoryPlan
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel


@dataclass(frozen=True, slots=True)
class RunPlan:
    backend: Backend
    fused: FusedForwards | None  # None: the elementwise chains run eagerly
    pack: PackPolicy | None  # None: one sequence per forward
    attention: AttentionKernel | None  # None: torch's choice, as entries before the pin
    replays: bool  # a pack's decoder layers replay recordings of their kind (layer_graphs.py)
    memory: MemoryPlan | None  # the card's, for this backend (None off CUDA)
    fingerprint: Fingerprint  # what the plan names; a pack that ran otherwise is named by `ran`

    @classmethod
    def of(
        cls,
        loaded: LoadedModel,
        backend: Backend,
        fused: FusedForwards | None,
        pack: PackPolicy | None,
        attention: AttentionKernel | None,
        replays: bool,
        memory: MemoryPlan | None,
    ) -> RunPlan:
        fingerprint = fingerprint_of(loaded, backend, fused is not None, pack, attention, replays)
        return cls(backend, fused, pack, attention, replays, memory, fingerprint)

    @property
    def fast(self) -> frozenset[str]:
        """The kernel roles the backend runs fast (the others run the torch reference)."""
        return SPECS[self.backend].fast

    def ran(self, replayed: bool) -> Fingerprint:
        """The fingerprint of a pack as it ran: a recording that failed in it left its layers eager."""
        return self.fingerprint.model_copy(update={"cuda_graphs": replayed})
