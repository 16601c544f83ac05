"""How much of this card a pack may take: the pack's rows and the longest sequence, worked out from the memory this
device has free once the weights are in and what a pack's rows cost here, measured.

Why measured, not estimated from the config: what a row costs is the kernels' (fla's chunk states, the per-sequence
GEMMs and norms of own-rows packs, cuBLAS's workspaces) and, where layers are replayed, the graph pools' besides. The
service sized packs at a fixed 16,384 rows, which an H200 held and an 80 GB H100 did not (#61): recording a layer kind
ran out of memory there. So calibration packs (`CALIBRATION_ROWS`, random tokens, every decoder layer, eager) give a
row's bytes as the slope of their peaks and the fixed part as the intercept, after an unmeasured first pack: a
kernel's first call (Triton's autotuning, lazily made workspaces) can add a passing peak to whichever pack runs first,
which flattened the slope of two packs to a third of a row's bytes on one H100 load of two (62 KB against 183 KB: a
longest sequence the card would not hold). The line lies on or above every measured peak; replayed layers' graph pools
are added by their measured share of a row, the stored layers of a featureset by their size, and the chunked
lm_head of one whose heads are asked for by its chunk's. A margin covers the allocator's rounding; a headroom stays
free for everything else on the card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch

from schemas.backend import Backend
from schemas.batching import PackPolicy
from schemas.device_run import MemoryPlanInfo
from schemas.featureset import FeatureSet
from service.errors import TooLarge
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel

log = logging.getLogger("hsstore.extraction")

GIB = 1 << 30
CALIBRATION_ROWS = (2048, 4096, 8192)  # measured, after an unmeasured pack of the first size
ROW_STEP = 1024  # pack shapes are multiples of this (and so of every pack policy's alignment)
MARGIN = 1.15  # on the measured bytes per row: the caching allocator rounds and splits blocks
# What replayed layers' graph pools hold per row, against a pack's eager peak per row: the pools of the two kinds of
# layer (two streams each, the newest graph of a kind alive while the next records) held 14 GB at 16,384 rows of the
# 64-layer 27B on an H100 (#61), ~854 KB a row against an eager peak of 183 KB (tests/gpu's plan, the same card).
# Calibration runs its layers eagerly (a recording of its own would be one more shape the pools meet): this counts them.
REPLAY_POOLS_PER_ROW = 5.0
HEAD_CHUNK_ROWS = 1024  # compute.forward's chunked lm_head


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """What the card has (`free`: after the weights, before any pack) and what a pack costs on it."""

    total: int
    free: int
    per_row: int  # a pack's peak bytes per row, every decoder layer run, one layer stored (as measured)
    fixed: int  # the peak's part that does not grow with the rows (workspaces, the rotary tables, ...)
    hidden_size: int
    vocab_size: int
    configured_rows: int  # the pack shape the settings ask for
    headroom: int = 0
    replayed: bool = False  # layers replayed: their graph pools grow with the rows too

    def __post_init__(self) -> None:
        if not self.headroom:
            object.__setattr__(self, "headroom", max(2 * GIB, self.total // 32))

    def _row_bytes(self, featureset: FeatureSet) -> float:
        """A row's bytes under `featureset`: the body's, with its margin, and the stored layers' beyond the one
        the calibration stored (captured in bfloat16, then converted to what is stored: counted twice)."""
        stored = 2 * self.hidden_size * 2 * max(len(featureset.layers) - 1, 0)
        pools = REPLAY_POOLS_PER_ROW if self.replayed else 0.0
        return self.per_row * (1 + pools) * MARGIN + stored

    def _budget(self, featureset: FeatureSet) -> float:
        heads = featureset.target_ids or featureset.top_k is not None
        logits = 3 * HEAD_CHUNK_ROWS * self.vocab_size * 4 if heads else 0  # logits, log-softmax, top-k in float32
        return self.free - self.fixed * MARGIN - self.headroom - logits

    def rows_that_fit(self, featureset: FeatureSet) -> int:
        """The most rows one pack may have under `featureset` (a multiple of ROW_STEP; 0 where none fit)."""
        rows = int(self._budget(featureset) // self._row_bytes(featureset))
        return max(rows // ROW_STEP * ROW_STEP, 0)

    def pack_rows(self, featureset: FeatureSet) -> int:
        """The pack shape to run `featureset` in: the configured one, or the most that fits where it does not."""
        return min(self.configured_rows, self.rows_that_fit(featureset))

    def longest_sequence(self, featureset: FeatureSet) -> int:
        """The longest sequence this card extracts under `featureset` (alone in a pack of its own length)."""
        return self.rows_that_fit(featureset)

    def holding(self, pack: PackPolicy | None, featureset: FeatureSet, lengths: Sequence[int]) -> PackPolicy | None:
        """`pack` as this card holds it under `featureset`: an own-rows pack's rows cut to what fits (its bits are
        each sequence's own whatever its rows); TooLarge for a sequence longer than the card holds, or for an earlier
        release's pack (whose bits follow its rows) that does not fit."""
        longest = self.longest_sequence(featureset)
        if (most := max(lengths, default=0)) > longest:
            raise TooLarge(
                f"{most} tokens exceed the limit of {longest} tokens per sample that this GPU holds under featureset "
                f"{featureset.id} (its memory plan: GET /v1/info)"
            )
        if pack is None:
            return None
        rows = self.pack_rows(featureset)
        if pack.own_rows:
            return pack if pack.tokens <= rows else PackPolicy(rows, pack.align)
        if pack.tokens > self.rows_that_fit(featureset):
            raise TooLarge(f"an earlier release's packs of {pack.tokens} rows do not fit this GPU (it holds {rows})")
        return pack

    def info(self, featureset: FeatureSet) -> MemoryPlanInfo:
        return MemoryPlanInfo(
            total_gib=round(self.total / GIB, 2),
            free_after_weights_gib=round(self.free / GIB, 2),
            bytes_per_row=self.per_row,
            fixed_gib=round(self.fixed / GIB, 2),
            headroom_gib=round(self.headroom / GIB, 2),
            featureset_id=featureset.id,
            pack_tokens=self.pack_rows(featureset),
            longest_sequence=self.longest_sequence(featureset),
        )

    @classmethod
    def from_peaks(
        cls,
        peaks: dict[int, int],
        total: int,
        free: int,
        hidden_size: int,
        vocab_size: int,
        configured_rows: int,
        replayed: bool = False,
    ) -> MemoryPlan:
        """The plan from calibration peaks (rows -> peak bytes above what was allocated before): the steepest slope
        between neighbouring sizes, through the highest of the peaks against it, so no measured pack lies above the
        line (a peak that grows faster than linearly is not under-counted at the rows beyond)."""
        sizes = sorted(peaks)
        slopes = [(peaks[b] - peaks[a]) // (b - a) for a, b in pairwise(sizes)]
        per_row = max([*slopes, 1])
        fixed = max(max(peaks[rows] - per_row * rows for rows in sizes), 0)
        return cls(total, free, per_row, fixed, hidden_size, vocab_size, configured_rows, replayed=replayed)


# one own-rows pack of `rows` random tokens through every decoder layer, as packs run here, under the extractor's lock
# and `backend`'s kernels, with the fused forwards it runs (None: eager)
Calibrate = Callable[[int, Backend, FusedForwards | None], None]


class MemoryPlans:
    """A plan per backend (their kernels hold different memory: torch's reference rule more than fla's), each
    measured the first time the backend runs packs on this CUDA device; none off CUDA."""

    def __init__(self, loaded: LoadedModel, configured_rows: int, calibrate: Calibrate, replayed: bool) -> None:
        self.loaded, self.configured_rows, self.calibrate, self.replayed = loaded, configured_rows, calibrate, replayed
        self._plans: dict[Backend, MemoryPlan] = {}

    def known(self, backend: Backend) -> MemoryPlan | None:
        return self._plans.get(backend)

    def plan(self, backend: Backend, fused: FusedForwards | None) -> MemoryPlan | None:
        """`backend`'s plan, measured now if it was not (the caller holds the lock and the backend's kernels)."""
        if backend not in self._plans and self.loaded.device.type == "cuda":
            self._plans[backend] = self._measure(backend, fused)
        return self._plans.get(backend)

    def _measure(self, backend: Backend, fused: FusedForwards | None) -> MemoryPlan:
        device = self.loaded.device
        torch.cuda.synchronize(device)
        free_now, total = torch.cuda.mem_get_info(device)
        base = torch.cuda.memory_allocated(device)
        free = free_now + torch.cuda.memory_reserved(device) - base  # the allocator's free blocks are ours to reuse
        self.calibrate(CALIBRATION_ROWS[0], backend, fused)  # unmeasured: every kernel's first call done
        torch.cuda.synchronize(device)
        peaks = {}
        for rows in CALIBRATION_ROWS:
            torch.cuda.reset_peak_memory_stats(device)
            self.calibrate(rows, backend, fused)
            torch.cuda.synchronize(device)
            peaks[rows] = torch.cuda.max_memory_allocated(device) - base
        config = self.loaded.config
        geometry = (int(config.hidden_size), int(config.vocab_size))
        plan = MemoryPlan.from_peaks(peaks, total, free, *geometry, self.configured_rows, replayed=self.replayed)
        default = FeatureSet.default_for(self.loaded.num_layers)
        log.info(
            "memory plan for %s on %s: %.1f GiB free after the weights, peaks %s, %d bytes a row (+%.1f GiB), packs "
            "of %d rows, the longest sequence %d tokens (default featureset)",
            backend.value,
            torch.cuda.get_device_name(device),
            free / GIB,
            {rows: f"{peak / GIB:.2f} GiB" for rows, peak in peaks.items()},
            plan.per_row,
            plan.fixed / GIB,
            plan.pack_rows(default),
            plan.longest_sequence(default),
        )
        return plan
