"""The catalog: entry keys -> versions, behind one protocol."""

from service.catalog.protocol import Catalog, EntryFilter
from service.catalog.sqlite import SqliteCatalog

__all__ = ["Catalog", "EntryFilter", "SqliteCatalog"]
