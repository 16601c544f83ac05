"""The catalog: entry versions, warm jobs and a key/value table, each behind its own narrow protocol."""

from service.catalog.protocol import JobStore, KeyValue, VersionCatalog, VersionStore
from service.catalog.sqlite import SqliteDatabase, SqliteJobStore, SqliteKeyValue, SqliteVersionCatalog

__all__ = [
    "JobStore",
    "KeyValue",
    "SqliteDatabase",
    "SqliteJobStore",
    "SqliteKeyValue",
    "SqliteVersionCatalog",
    "VersionCatalog",
    "VersionStore",
]
