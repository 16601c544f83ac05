"""What the store holds, as `GET /v1/health`, `hsstore health` and `/metrics` say it: from the tallies the catalog
keeps current as versions are written and marked, and the index of those needing attention."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from typer.testing import CliRunner

from client import FeatureClient
from hsstore.cli import app as cli
from schemas.manifest import IntegrityRecord
from schemas.states import Integrity


def test_health_and_metrics_read_the_tallies(app: FastAPI, live_url: str) -> None:
    with FeatureClient(live_url) as client:
        stored = [r.manifest for r in client.extract([{"text": f"def f{i}(): return {i}"} for i in range(3)]).results]
        healthy = client.health()
        (tally,) = healthy.tallies
        assert (tally.entries, tally.tokens, tally.damaged) == (3, sum(m.num_tokens for m in stored), 0)
        assert healthy.attention == []
        damaged = IntegrityRecord(status=Integrity.CORRUPT, checked_at="2026-12-05T00:00:00.000000Z", detail="crc")
        app.state.services.versions.set_integrity(stored[1].content_hash, damaged)  # what a scrub records
        (tally,) = client.health().tallies
        assert tally.damaged == 1 and [m.content_hash for m in client.health().attention] == [stored[1].content_hash]
    said = CliRunner().invoke(cli, ["health", "--url", live_url])
    assert said.exit_code == 1 and "3 entries: 0 flagged by the content checks, 1 damaged" in said.output
    assert f"damaged {stored[1].prompt_hash[:10]}" in said.output
    scraped = httpx.get(f"{live_url}/metrics").text
    space = f'backend="{tally.backend}",featureset="{tally.featureset_id}",model_revision="{tally.model_revision}"'
    assert f"hsstore_store_entries{{{space}}} 3.0" in scraped
    assert f"hsstore_store_damaged_entries{{{space}}} 1.0" in scraped and "hsstore_catalog_up 1.0" in scraped
    assert f"hsstore_store_unchecked_entries{{{space}}} 2.0" in scraped  # the scrub's mark checked one of the 3
    assert "1 damaged, 0 imports to check against the model; 2 never checked" in said.output
