"""What each configured URL scheme or name builds, one row each (as MLflow's store registry maps a URI's scheme to a
factory): the blob store `store_url` names, the catalog `catalog_url` names, the GPU hand-over `handover` names. A
new engine is one factory and one row here; nothing else chooses among them. Before any of them opens a file under
data_dir (the local store's and catalog's home), `check_data_dir` says what is wrong with it, if anything."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from service.catalog import SqliteDatabase, SqliteJobStore, SqliteKeyValue, SqliteVersionCatalog
from service.catalog.protocol import Database, JobStore, KeyValue, VersionStore
from service.catalog.schema.migrations import PartSchema
from service.errors import ConfigError
from service.host.handover import CommandHandover, GpuHandover, MemorySaverHandover, NoHandover
from service.host.sglang import SGLangClient
from service.host.sglang_canary import CheckedHandover
from service.settings import Settings
from service.storage.object_store import OBJECT_STORES, ObjectZarrStore, open_url
from service.storage.protocol import BlobStore
from service.storage.zarr_local import LocalZarrStore

Catalog = tuple[Database, VersionStore, JobStore, KeyValue]
LOCAL = None  # no URL: the store or catalog under data_dir (a URL without a scheme is of no known kind)


def _scheme(url: str | None) -> str | None:
    return LOCAL if url is None else urlsplit(url).scheme


# --- blob stores ---


def _local_store(settings: Settings, read_only: bool) -> BlobStore:
    return LocalZarrStore(
        settings.data_dir,
        settings.chunk_tokens,
        read_only=read_only,
        codec=settings.codec,
        codec_threads=settings.write_codec_threads,
    )


def _object_store(settings: Settings, read_only: bool) -> BlobStore:
    assert settings.store_url is not None  # the table routes only a URL here
    objects = open_url(settings.store_url, settings.s3_endpoint)
    return ObjectZarrStore(
        objects,
        settings.chunk_tokens,
        read_only,
        settings.codec,
        url=settings.store_url,
        codec_threads=settings.write_codec_threads,
    )


STORES: dict[str | None, Callable[[Settings, bool], BlobStore]] = {
    LOCAL: _local_store,
    **dict.fromkeys(OBJECT_STORES, _object_store),
}


def build_store(settings: Settings, read_only: bool) -> BlobStore:
    factory = STORES.get(_scheme(settings.store_url))
    if factory is None:
        raise ConfigError(f"store_url {settings.store_url!r}: expected s3://bucket/prefix or file:///path")
    return factory(settings, read_only)


# --- catalogs ---


def check_data_dir(data_dir: Path, create: bool) -> None:
    """ConfigError naming the setting and what is wrong with the path, before anything opens a file under it: a file
    where the directory (or one above it) should be, or a directory that cannot be made or written (`create`)."""
    for path in (data_dir, *data_dir.parents):
        if path.exists():
            if not path.is_dir():
                where = "is a file" if path == data_dir else f"lies under {path}, which is a file"
                raise ConfigError(f"data_dir {data_dir} {where}, not a directory: name a directory (HSSTORE_DATA_DIR)")
            break
    if not create:
        return
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"data_dir {data_dir} cannot be created: {exc.strerror} (HSSTORE_DATA_DIR)") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"data_dir {data_dir} is not writable by this user (HSSTORE_DATA_DIR)")


class CatalogEngine(Protocol):
    def build(self, settings: Settings, read_only: bool) -> Catalog: ...

    def schema(self, settings: Settings) -> list[PartSchema] | None:
        """How far the catalog's schema is, part by part, read without migrating (None: no catalog yet)."""
        ...


def _parts(database: Database, migrations: dict[str, list]) -> list[PartSchema]:
    try:
        return [PartSchema(part, database.schema_version(part), len(steps)) for part, steps in migrations.items()]
    finally:
        database.close()


class _Sqlite:
    def build(self, settings: Settings, read_only: bool) -> Catalog:
        sqlite = SqliteDatabase(settings.catalog_path, read_only=read_only)
        return sqlite, SqliteVersionCatalog(sqlite), SqliteJobStore(sqlite), SqliteKeyValue(sqlite)

    def schema(self, settings: Settings) -> list[PartSchema] | None:
        from service.catalog.sqlite import jobs, kv, versions

        check_data_dir(settings.data_dir, create=False)
        if not settings.catalog_path.exists():
            return None
        database = SqliteDatabase(settings.catalog_path, read_only=True)
        return _parts(database, {"versions": versions.MIGRATIONS, "jobs": jobs.MIGRATIONS, "kv": kv.MIGRATIONS})


class _Postgres:
    """Imported on use: psycopg needs libpq, which a host on SQLite (a GPU box, a laptop) need not have."""

    def build(self, settings: Settings, read_only: bool) -> Catalog:
        from service.catalog.postgres import (
            PostgresDatabase,
            PostgresJobStore,
            PostgresKeyValue,
            PostgresVersionCatalog,
        )

        assert settings.catalog_url is not None  # the table routes only a URL here
        postgres = PostgresDatabase(
            settings.catalog_url, read_only=read_only, max_connections=settings.catalog_connections
        )
        return postgres, PostgresVersionCatalog(postgres), PostgresJobStore(postgres), PostgresKeyValue(postgres)

    def schema(self, settings: Settings) -> list[PartSchema] | None:
        from service.catalog.postgres import PostgresDatabase, jobs, kv, versions

        assert settings.catalog_url is not None
        database = PostgresDatabase(settings.catalog_url, read_only=True, max_connections=1)
        return _parts(database, {"versions": versions.MIGRATIONS, "jobs": jobs.MIGRATIONS, "kv": kv.MIGRATIONS})


CATALOGS: dict[str | None, CatalogEngine] = {LOCAL: _Sqlite(), "postgresql": _Postgres(), "postgres": _Postgres()}


def catalog_engine(settings: Settings) -> CatalogEngine:
    engine = CATALOGS.get(_scheme(settings.catalog_url))
    if engine is None:
        raise ConfigError(f"catalog_url {settings.catalog_url!r}: expected postgresql://user:pass@host/db")
    return engine


def build_catalog(settings: Settings, read_only: bool) -> Catalog:
    """SQLite under data_dir, or the Postgres `catalog_url` names: each part on the engine's one shared database."""
    return catalog_engine(settings).build(settings, read_only)


def catalog_schema(settings: Settings) -> list[PartSchema] | None:
    return catalog_engine(settings).schema(settings)


def catalog_location(settings: Settings) -> str:
    """Where the catalog is, as a message may say it: the Postgres URL with its password hidden, or the file."""
    if settings.catalog_url is not None:
        from service.catalog.postgres.database import masked

        return masked(settings.catalog_url)
    return str(settings.catalog_path)


# --- GPU hand-overs ---


def _memory_saver(settings: Settings) -> GpuHandover:
    if not settings.sglang_url:
        raise ConfigError("handover = memory_saver needs sglang_url")
    return MemorySaverHandover(settings.sglang_url, settings.handover_timeout_s)


def _commands(settings: Settings) -> GpuHandover:
    if not (settings.sglang_stop_command and settings.sglang_start_command and settings.sglang_url):
        raise ConfigError("handover = commands needs sglang_stop_command, sglang_start_command and sglang_url")
    return CommandHandover(
        settings.sglang_stop_command, settings.sglang_start_command, settings.sglang_url, settings.handover_timeout_s
    )


HANDOVERS: dict[str, Callable[[Settings], GpuHandover]] = {
    "none": lambda _: NoHandover(),
    "memory_saver": _memory_saver,
    "commands": _commands,
}


def build_handover(settings: Settings, on_sglang_mismatch: Callable[[], None] = lambda: None) -> GpuHandover:
    """The hand-over the settings name, its resume checked by SGLang's greedy canary (`sglang_canary`)."""
    inner = HANDOVERS[settings.handover](settings)
    if inner.name == "none" or not settings.sglang_canary or not settings.sglang_url:
        return inner
    return CheckedHandover(inner, SGLangClient(settings.sglang_url, settings.handover_timeout_s), on_sglang_mismatch)
