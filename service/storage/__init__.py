"""Content-addressed blob storage behind one protocol."""

from service.storage.protocol import BlobStore, Selection
from service.storage.zarr_local import LocalZarrStore

__all__ = ["BlobStore", "LocalZarrStore", "Selection"]
