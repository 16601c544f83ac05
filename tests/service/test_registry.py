"""The registry: each configured scheme or name builds its one engine, and one of no known kind is a ConfigError
that names the setting (never a fallback to another engine)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from schemas.content_hash import content_hash
from schemas.tensors import RawTensor
from service.catalog import SqliteVersionCatalog
from service.errors import ConfigError
from service.host.handover import NoHandover
from service.registry import CATALOGS, HANDOVERS, STORES, build_catalog, build_store, catalog_schema
from service.settings import Settings
from service.storage.object_store import ObjectZarrStore
from service.storage.shard_writer import codec_pool
from service.storage.zarr_local import LocalZarrStore


def test_no_url_is_the_local_store_and_catalog_and_file_urls_an_object_store(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    assert isinstance(build_store(settings, read_only=False), LocalZarrStore)
    assert catalog_schema(settings) is None  # nothing created yet
    database, versions, *_ = build_catalog(settings, read_only=False)
    assert isinstance(versions, SqliteVersionCatalog)
    database.close()
    assert [part.part for part in catalog_schema(settings) or []] == ["versions", "jobs", "kv"]
    shared = settings.model_copy(update={"store_url": (tmp_path / "shared").as_uri()})
    assert isinstance(build_store(shared, read_only=False), ObjectZarrStore)


@pytest.mark.parametrize(
    ("setting", "url"), [("store_url", "gs://bucket/x"), ("store_url", "/plain/path"), ("catalog_url", "mysql://h/db")]
)
def test_a_url_of_no_known_scheme_names_its_setting(tmp_path: Path, setting: str, url: str) -> None:
    settings = Settings(data_dir=tmp_path, **{setting: url})
    with pytest.raises(ConfigError, match=setting):
        (build_store if setting == "store_url" else build_catalog)(settings, read_only=False)


def test_every_handover_setting_has_its_row_and_the_tables_name_their_engines() -> None:
    assert set(HANDOVERS) == set(get_args(Settings.model_fields["handover"].annotation))
    assert isinstance(HANDOVERS["none"](Settings()), NoHandover)
    assert {None, "s3", "file"} <= set(STORES) and {None, "postgresql"} <= set(CATALOGS)


@pytest.mark.parametrize(("handover", "missing"), [("memory_saver", "sglang_url"), ("commands", "sglang_stop_command")])
def test_a_handover_missing_what_it_needs_is_a_config_error_naming_it(handover: str, missing: str) -> None:
    with pytest.raises(ConfigError, match=missing):
        HANDOVERS[handover](Settings(handover=handover))  # type: ignore[arg-type]


def test_both_stores_compress_new_blobs_on_the_write_codec_threads_setting(tmp_path: Path) -> None:
    """The writers' codec pool is the setting's size, in every store, not the readers' thread per core (each thread
    more that writes costs the extracting thread GIL waits: settings.py)."""
    settings = Settings(data_dir=tmp_path / "data", write_codec_threads=1)
    shared = settings.model_copy(update={"store_url": (tmp_path / "shared").as_uri()})
    tensor = RawTensor.from_numpy("hidden_states", "bfloat16", np.arange(4 * 5 * 8, dtype="<u2").reshape(4, 5, 8))
    for store in (build_store(settings, read_only=False), build_store(shared, read_only=False)):
        assert isinstance(store, LocalZarrStore | ObjectZarrStore) and store.codec_threads == 1
        assert store.put_if_absent(content_hash([tensor]), [tensor]).written
        assert codec_pool(1)._max_workers == 1 and _threads_named("hsstore-write-1") == 1  # its chunks ran there


def _threads_named(prefix: str) -> int:
    return sum(thread.name.startswith(prefix) for thread in threading.enumerate())
