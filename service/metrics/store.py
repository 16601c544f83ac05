"""What the store holds, as gauges read at each scrape: the tallies the catalog keeps current (a row per key space,
never a scan of the versions) and whether the catalog and the blob store answered."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.catalog.protocol import StoreTallies
from service.storage.protocol import BlobStore

# what each key space's tally says, as a gauge labelled by the key space: the gauge's name, its help, the tally's part
_STORE_GAUGES = (
    ("hsstore_store_entries", "versions stored", "entries"),
    ("hsstore_store_tokens", "tokens the stored versions hold", "tokens"),
    ("hsstore_store_bytes", "bytes the stored versions' tensors hold before compression", "bytes"),
    ("hsstore_store_flagged_entries", "versions the content checks found unusual", "flagged"),
    ("hsstore_store_damaged_entries", "versions whose stored bytes a check found changed", "damaged"),
    ("hsstore_store_suspect_entries", "imports found wrong, suspect by their run, or never vetted", "suspect"),
    (
        "hsstore_store_unchecked_entries",
        "versions neither re-extracted by an audit nor read back by a scrub",
        "unchecked",
    ),
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
