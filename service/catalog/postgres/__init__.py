"""The catalog in Postgres: each narrow protocol implemented on one shared connection pool, for clusters of replicas
and workers."""

from service.catalog.postgres.database import PostgresDatabase
from service.catalog.postgres.jobs import PostgresJobStore
from service.catalog.postgres.kv import PostgresKeyValue
from service.catalog.postgres.versions import PostgresVersionCatalog

__all__ = ["PostgresDatabase", "PostgresJobStore", "PostgresKeyValue", "PostgresVersionCatalog"]
