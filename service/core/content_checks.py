"""Write-time content checks: features can hash fine and still be garbage.

What users of this field lose weeks to is stored features that no model computed — all-zero hidden states from a
broken hybrid-attention path, a dump whose rows are padding. The content hash proves we serve what we stored; these
checks judge what is stored, on every extraction and import, from the per-layer summary the writer has anyway
(NaN and Inf are refused before this, where the summary is read):

- a layer constant over the whole entry (all zeros among them): refused;
- more than `constant_share` of a layer's rows (tokens) constant: refused (a single padding or zero-embedding token
  passes);
- a layer's std or absmax far outside the band of its key space's first entries (same model revision, backend and
  featureset; a robust z-score of the log, median and MAD over up to `band_entries`, once there are
  `band_min_entries`): refused from `refuse_z`, stored and flagged (`Manifest.content_flags`) from `flag_z`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import LayerStats
from service.catalog.protocol import VersionCatalog
from service.errors import ImplausibleFeatures

_MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution, in standard deviations
_MIN_LOG_SPREAD = 0.05  # a band whose entries agree closely still allows ~5% (log) of spread per sigma
_SCALES = ("std", "absmax")  # scale statistics, compared in log space


@dataclass(frozen=True, slots=True)
class ContentChecks:
    versions: VersionCatalog
    constant_share: float = 0.25
    band_entries: int = 64
    band_min_entries: int = 16
    flag_z: float = 8.0
    refuse_z: float = 40.0
    # a key space's band once it is whole: its first entries never change, so it is read from the catalog no more
    _bands: dict[tuple[str, str, str], list[list[LayerStats]]] = field(default_factory=dict, repr=False)

    def check(self, key: EntryKey, stats: Sequence[LayerStats], constant_rows: Sequence[int], tokens: int) -> list[str]:
        """The flags to store with the entry; ImplausibleFeatures (nothing stored) naming the check that failed."""
        for layer, rows in zip(stats, constant_rows, strict=True):
            if layer.std == 0:
                raise ImplausibleFeatures(
                    f"layer {layer.layer} is constant over all {tokens} tokens (every value {layer.mean:g}): no model "
                    "computes that; nothing was stored"
                )
            if rows > self.constant_share * tokens:
                raise ImplausibleFeatures(
                    f"layer {layer.layer}: {rows} of {tokens} rows are constant (all-zero or padding rows; more than "
                    f"{self.constant_share:.0%} is refused, `content_constant_rows`); nothing was stored"
                )
        return self._against_band(key, stats)

    def _against_band(self, key: EntryKey, stats: Sequence[LayerStats]) -> list[str]:
        if self.band_entries < self.band_min_entries:
            return []
        band = self._band(key)
        if len(band) < self.band_min_entries:
            return []
        flags = []
        for position, layer in enumerate(stats):
            for name in _SCALES:
                earlier = [
                    math.log(getattr(entry[position], name))
                    for entry in band
                    if len(entry) == len(stats) and getattr(entry[position], name) > 0  # older entries: unchecked
                ]
                if len(earlier) < self.band_min_entries:
                    continue
                median = statistics.median(earlier)
                spread = max(_MAD_TO_SIGMA * statistics.median(abs(v - median) for v in earlier), _MIN_LOG_SPREAD)
                z = abs(math.log(getattr(layer, name)) - median) / spread
                what = (
                    f"layer {layer.layer} {name} {getattr(layer, name):.4g} against a median of {math.exp(median):.4g}"
                    f" over {len(earlier)} earlier entries (robust z {z:.0f})"
                )
                if z >= self.refuse_z:
                    raise ImplausibleFeatures(
                        f"{what}: far outside its band (`content_refuse_z` {self.refuse_z:g}); nothing was stored"
                    )
                if z >= self.flag_z:
                    flags.append(f"unusual: {what}")
        return flags

    def _band(self, key: EntryKey) -> list[list[LayerStats]]:
        space = (key.model_revision, key.backend, key.featureset_id)
        if (whole := self._bands.get(space)) is not None:
            return whole
        where = EntryFilter(model_revision=key.model_revision, backend=key.backend, featureset=key.featureset_id)
        band = [m.layer_stats for m in self.versions.find(where, limit=self.band_entries)]
        if len(band) == self.band_entries:
            self._bands[space] = band
        return band
