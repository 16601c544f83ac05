"""Write-time content checks: features can hash fine and still be garbage.

What users of this field lose weeks to is stored features that no model computed — all-zero hidden states from a
broken hybrid-attention path, a dump whose rows are padding. The content hash proves we serve what we stored; these
checks judge what is stored, on every extraction and import, from the per-layer summary the writer has anyway
(NaN and Inf are refused before this, where the summary is read):

- a layer constant over the whole entry (all zeros among them): refused;
- more than `constant_rows` of a layer's rows (tokens) constant: refused (a single padding or zero-embedding token
  passes);
- more than `repeated_rows` of a layer's rows equal to the row before although the token changed: refused (one
  token's states copied to every position; no causal model computes the same state at every position);
- a decoder layer whose std jumps from the decoder layer before it in the featureset by more than the residual
  stream grows (`grow_refuse`: 300x; flagged from `grow_flag`), or falls by more than it shrinks (`shrink_refuse`:
  20x; flagged from `shrink_flag`): one layer scaled by 1,000 is off its neighbours either way, wherever it sits,
  and needs no earlier entries to be seen (`benchmarks/results/layer-scales-h200.json`: the 27B shape's std grows at
  most 4.0x over 15 layers and never shrinks, the tiny model's at most 2.2x over 4; the margins are for real models,
  whose first layers can grow by far more where massive activations appear);
- a layer's std or absmax far outside the band of the first entries of its model revision and featureset (every
  backend's, so an import is judged against what this store extracted; a robust z-score of the log, median and MAD
  over up to `band_entries`, once there are `band_min_entries`): refused from `refuse_z`, stored and flagged
  (`Manifest.content_flags`) from `flag_z`.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import LayerStats
from service.catalog.protocol import VersionCatalog
from service.errors import ImplausibleFeatures
from service.extraction.stats import RowCounts

_MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution, in standard deviations
_MIN_LOG_SPREAD = 0.05  # a band whose entries agree closely still allows ~5% (log) of spread per sigma
_SCALES = ("std", "absmax")  # scale statistics, compared in log space


@dataclass(frozen=True, slots=True)
class ContentLimits:
    """What the checks refuse or flag: the `content_*` settings, each field named as its setting's tail."""

    constant_rows: float
    repeated_rows: float
    grow_flag: float
    grow_refuse: float
    shrink_flag: float
    shrink_refuse: float
    band_entries: int
    band_min_entries: int
    flag_z: float
    refuse_z: float


@dataclass(frozen=True, slots=True)
class ContentChecks:
    versions: VersionCatalog
    limits: ContentLimits
    # a key space's band once it is whole: its first entries never change, so it is read from the catalog no more
    _bands: dict[tuple[str, str], list[list[LayerStats]]] = field(default_factory=dict, repr=False)

    def check(
        self,
        key: EntryKey,
        stats: Sequence[LayerStats],
        rows: Sequence[RowCounts],
        tokens: int,
    ) -> list[str]:
        """The flags to store with the entry; ImplausibleFeatures (nothing stored) naming the check that failed."""
        for layer, counted in zip(stats, rows, strict=True):
            if layer.std == 0:
                raise ImplausibleFeatures(
                    f"layer {layer.layer} is constant over all {tokens} tokens (every value {layer.mean:g}): no model "
                    "computes that; nothing was stored"
                )
            if counted.constant > self.limits.constant_rows * tokens:
                raise ImplausibleFeatures(
                    f"layer {layer.layer}: {counted.constant} of {tokens} rows are constant (all-zero or padding rows; "
                    f"more than {self.limits.constant_rows:.0%} is refused, `content_constant_rows`); nothing was "
                    "stored"
                )
            if counted.changed and counted.repeated > self.limits.repeated_rows * counted.changed:
                raise ImplausibleFeatures(
                    f"layer {layer.layer}: {counted.repeated} of the {counted.changed} rows whose token differs from "
                    "the one before repeat the row before (no causal model computes the same state at every "
                    f"position; more than {self.limits.repeated_rows:.0%} is refused, `content_repeated_rows`); "
                    "nothing was stored"
                )
        return self._across_depth(stats) + self._against_band(key, stats)

    def _across_depth(self, stats: Sequence[LayerStats]) -> list[str]:
        """Each decoder layer against the one before it in the featureset: the residual stream grows with depth,
        smoothly enough that a layer scaled far off stands out from its neighbours with no earlier entries."""
        decoder = [layer for layer in stats if isinstance(layer.layer, int)]
        flags = []
        for before, after in itertools.pairwise(decoder):
            ratio = after.std / before.std
            size = f"{ratio:.3g}x" if ratio > 1 else f"1/{1 / ratio:.3g} of"
            what = f"layer {after.layer}'s std {after.std:.4g} is {size} layer {before.layer}'s {before.std:.4g}"
            if ratio >= self.limits.grow_refuse or 1 / ratio >= self.limits.shrink_refuse:
                raise ImplausibleFeatures(
                    what + ": no residual stream jumps so between layers (one layer scaled or another model's; "
                    "`content_grow_refuse`, `content_shrink_refuse`); nothing was stored"
                )
            if ratio >= self.limits.grow_flag or 1 / ratio >= self.limits.shrink_flag:
                flags.append("unusual: " + what)
        return flags

    def _against_band(self, key: EntryKey, stats: Sequence[LayerStats]) -> list[str]:
        if self.limits.band_entries < self.limits.band_min_entries:
            return []
        band = self._band(key)
        if len(band) < self.limits.band_min_entries:
            return []
        flags = []
        for position, layer in enumerate(stats):
            for name in _SCALES:
                earlier = [
                    math.log(getattr(entry[position], name))
                    for entry in band
                    if len(entry) == len(stats) and getattr(entry[position], name) > 0  # older entries: unchecked
                ]
                if len(earlier) < self.limits.band_min_entries:
                    continue
                median = statistics.median(earlier)
                spread = max(_MAD_TO_SIGMA * statistics.median(abs(v - median) for v in earlier), _MIN_LOG_SPREAD)
                z = abs(math.log(getattr(layer, name)) - median) / spread
                what = (
                    f"layer {layer.layer} {name} {getattr(layer, name):.4g} against a median of {math.exp(median):.4g}"
                    f" over {len(earlier)} earlier entries (robust z {z:.0f})"
                )
                if z >= self.limits.refuse_z:
                    raise ImplausibleFeatures(
                        f"{what}: far outside its band (`content_refuse_z` {self.limits.refuse_z:g}); nothing was "
                        "stored"
                    )
                if z >= self.limits.flag_z:
                    flags.append(f"unusual: {what}")
        return flags

    def _band(self, key: EntryKey) -> list[list[LayerStats]]:
        space = (key.model_revision, key.featureset_id)  # every backend's: they differ in bits, not in scale
        if (whole := self._bands.get(space)) is not None:
            return whole
        where = EntryFilter(model_revision=key.model_revision, featureset_id=key.featureset_id)
        band = [m.layer_stats for m in self.versions.find(where, limit=self.limits.band_entries)]
        if len(band) == self.limits.band_entries:
            self._bands[space] = band
        return band
