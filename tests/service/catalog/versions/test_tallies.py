"""A key space's tally is one list of counts (manifest_rows.TALLY_COUNTS) that the table, what a version adds, the
contract's StoreTally and /metrics all follow: a count added in one place and not the others fails here."""

from __future__ import annotations

from pathlib import Path

from schemas.checks_api import StoreTally
from service.catalog import SqliteDatabase, SqliteVersionCatalog
from service.catalog.testing import manifest
from service.catalog.versions.manifest_rows import TALLY_COUNTS, tally_of
from service.metrics.store import _STORE_GAUGES


def test_every_count_is_a_column_a_part_of_what_a_version_adds_a_field_and_a_gauge(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "catalog.sqlite")
    try:
        versions = SqliteVersionCatalog(db)  # every migration step run
        with db.connection() as conn:
            columns = [row[1] for row in conn.execute("PRAGMA table_info(tallies)").fetchall()]
        assert columns == ["space", *TALLY_COUNTS]
        assert len(tally_of(manifest())) == len(TALLY_COUNTS)
        fields = [name for name, field in StoreTally.model_fields.items() if field.annotation is int]
        assert fields == list(TALLY_COUNTS)
        assert [part for _, _, part in _STORE_GAUGES] == list(TALLY_COUNTS)
        versions.add(manifest())
        (tally,) = versions.tallies()
        assert (tally.entries, tally.tokens, tally.unchecked) == (1, 3, 1)
    finally:
        db.close()
