"""The identity migration on a store written by 61ec308 (`tests/fixtures/store-61ec308`: SQLite, and Postgres from its
dump), whose samples with null members were keyed as sent: after opening it with this code, every version is under
its sample's normal-form key (twins met as one version), nothing is lost, `verify` finds every blob intact, the old
prompt hashes a client still holds (the dataset snapshot's among them) read the same bytes, and a rebuild of the
catalog from the manifest documents as they were written comes to the same keys and aliases."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from client import FeatureClient
from schemas.keys import EntryFilter
from schemas.prompt_hash import prompt_hash
from service.main import build_services, create_app
from service.settings import Settings
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "store-61ec308"


def _old_rows(data_dir: Path, catalog_url: str | None) -> list[dict]:
    """The versions as the old code recorded them, read with SQL alone (no hsstore code between)."""
    query = "SELECT prompt_hash, model_revision, backend, featureset_id, content_hash, manifest, audit FROM versions"
    if catalog_url is None:
        with sqlite3.connect(data_dir / "catalog.sqlite") as conn:
            rows = conn.execute(query).fetchall()
    else:
        with psycopg.connect(catalog_url) as conn:
            rows = conn.execute(query).fetchall()
    names = ("prompt_hash", "model_revision", "backend", "featureset_id", "content_hash", "manifest", "audit")
    return [dict(zip(names, row, strict=True)) for row in rows]


def _moves(rows: list[dict]) -> dict[str, str]:
    """Old prompt hash -> the normal form's, for the rows whose sample had a null member."""
    moved = {row["prompt_hash"]: prompt_hash(json.loads(row["manifest"])["sample"]) for row in rows}
    return {before: after for before, after in moved.items() if before != after}


def _load_dump(catalog_url: str, dump: Path) -> None:
    """pg_dump's text without its psql meta-commands (`\\restrict`), run as one script."""
    script = "\n".join(line for line in dump.read_text().splitlines() if not line.startswith("\\"))
    with psycopg.connect(catalog_url, autocommit=True) as conn:
        conn.execute(script)  # type: ignore[call-overload]  # a literal script of the fixture's, no parameters


@pytest.fixture(params=["sqlite", "postgres"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str | None]]:
    data_dir = tmp_path / "store"
    shutil.copytree(FIXTURE / request.param, data_dir)
    catalog_url = None
    if request.param == "postgres":
        catalog_url = request.getfixturevalue("postgres_url")
        _load_dump(catalog_url, data_dir / "catalog.sql")
    yield data_dir, catalog_url


def test_a_store_of_the_old_rule_moves_to_the_normal_form_and_its_old_hashes_still_read(
    old_store: tuple[Path, str | None],
) -> None:
    data_dir, catalog_url = old_store
    old = _old_rows(data_dir, catalog_url)
    expected = {
        (prompt_hash(json.loads(row["manifest"])["sample"]), row["featureset_id"], row["content_hash"]) for row in old
    }
    moved = _moves(old)
    assert len(moved) >= 4 and len(expected) < len(old), "the fixture holds samples that move and twins that meet"

    settings = Settings(data_dir=data_dir, catalog_url=catalog_url)
    services = build_services(settings)
    try:
        stored = services.versions.find(EntryFilter(), limit=1000)
        assert {(m.prompt_hash, m.featureset_id, m.content_hash) for m in stored} == expected
        assert all(m.prompt_hash == prompt_hash(m.sample) and "null" not in json.dumps(m.sample) for m in stored)
        assert {row["content_hash"] for row in old} == {m.content_hash for m in stored}  # no bytes lost
        audited = {
            (prompt_hash(json.loads(r["manifest"])["sample"]), r["featureset_id"], r["content_hash"])
            for r in old
            if r["audit"]
        }
        assert audited and {(m.prompt_hash, m.featureset_id, m.content_hash) for m in stored if m.audit} == audited
        report = services.verifier.scrub(restart=True)
        assert (report.checked, report.corrupt) == (len(stored), [])
        assert all(services.versions.moved_to(before) == after for before, after in moved.items())
    finally:
        services.close()

    with (
        TestClient(create_app(settings), base_url="http://hsstore.test") as http,
        FeatureClient(http=http) as client,
    ):
        for row in old:  # each old key reads the bytes it named
            features = client.get(
                prompt_hash=row["prompt_hash"], featureset=row["featureset_id"], backend=row["backend"]
            )
            assert features.manifest.content_hash == row["content_hash"]
            assert features.manifest.prompt_hash == moved.get(row["prompt_hash"], row["prompt_hash"])
        snapshot = client.dataset("everything")  # written before the move: its records hold the old hashes
        assert {snapshot.key(i).prompt_hash for i in range(len(snapshot))} & set(moved)
        read = client.get_many([snapshot.key(i) for i in range(len(snapshot))])
        assert [f.manifest.content_hash for f in read] == [snapshot.key(i).content_hash for i in range(len(snapshot))]
        for row in old:  # the samples as they were sent, nulls and all, find their entries
            sample = json.loads(row["manifest"])["sample"]
            assert client.get(sample, featureset=row["featureset_id"]).manifest.content_hash == row["content_hash"]
        job = client.jobs()[0]
        assert (job.done, job.failed) == (job.total, 0)


def test_a_rebuild_from_the_old_documents_keys_them_by_the_normal_form(old_store: tuple[Path, str | None]) -> None:
    data_dir, catalog_url = old_store
    moved = _moves(_old_rows(FIXTURE / "sqlite", None))  # the same samples, hashes and bytes in either fixture
    migrated = build_services(Settings(data_dir=data_dir, catalog_url=catalog_url))
    expected = {(m.key, m.content_hash) for m in migrated.versions.find(EntryFilter(), limit=1000)}
    migrated.close()

    fresh = data_dir.parent / "rebuilt"
    fresh.mkdir()
    shutil.copytree(data_dir / "blobs", fresh / "blobs")
    shutil.copytree(data_dir / "manifests", fresh / "manifests")
    rebuilt = build_services(Settings(data_dir=fresh))
    try:
        report = rebuilt.rebuilder.rebuild()
        assert report.rejected == []
        assert {(m.key, m.content_hash) for m in rebuilt.versions.find(EntryFilter(), limit=1000)} == expected
        assert all(rebuilt.versions.moved_to(before) == after for before, after in moved.items())
    finally:
        rebuilt.close()
