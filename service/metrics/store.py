"""What the store holds, as gauges read at each scrape: the tallies the catalog keeps current (a row per key space,
never a scan of the versions) and whether the catalog and the blob store answered."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from schemas.checks_api import StoreTally
from service.catalog.protocol import StoreTallies
from service.storage.protocol import BlobStore

# Each count of a key space's tally (a StoreTally field) as a gauge labelled by the key space, its help the field's
# description: hsstore_store_<count>, and for the counts of versions in a state hsstore_store_<state>_entries.
_TOTALS = frozenset({"entries", "tokens", "bytes"})
_STORE_GAUGES = tuple(
    (f"hsstore_store_{name}" if name in _TOTALS else f"hsstore_store_{name}_entries", field.description or name, name)
    for name, field in StoreTally.model_fields.items()
    if field.annotation is int
)
_SPACE = ["model_revision", "backend", "featureset"]


class StoreCollector(Collector):
    """What the store holds, read at each scrape from the tallies the catalog keeps current (a row per key space,
    never a scan of the versions), and whether the catalog and the blob store answered."""

    def __init__(self, tallies: StoreTallies, blobs: BlobStore) -> None:
        self.tallies, self.blobs = tallies, blobs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            tallies, up = self.tallies.tallies(), 1
        except Exception:  # a scrape during an outage says so, and answers
            tallies, up = [], 0
        yield GaugeMetricFamily("hsstore_catalog_up", "whether the catalog answered this scrape", value=up)
        yield GaugeMetricFamily(
            "hsstore_store_up", "whether the blob store answered this scrape", value=self._answers()
        )
        for name, help_text, part in _STORE_GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=_SPACE)
            for tally in tallies:
                gauge.add_metric([tally.model_revision, tally.backend, tally.featureset_id], getattr(tally, part))
            yield gauge

    def _answers(self) -> float:
        try:
            self.blobs.ping()
        except Exception:  # an outage, said by the gauge
            return 0.0
        return 1.0
