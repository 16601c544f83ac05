"""The catalog in one SQLite file: each narrow protocol implemented on one shared connection."""

from service.catalog.sqlite.database import SqliteDatabase
from service.catalog.sqlite.jobs import SqliteJobStore
from service.catalog.sqlite.kv import SqliteKeyValue
from service.catalog.sqlite.versions import SqliteVersionCatalog

__all__ = ["SqliteDatabase", "SqliteJobStore", "SqliteKeyValue", "SqliteVersionCatalog"]
