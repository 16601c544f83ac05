"""The app factory: one app per settings object, so tests build one per temporary store."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import __version__
from service.api import error_handlers
from service.api import metrics as metrics_api
from service.api.body_limit import BodyLimit
from service.api.routes import audit, compare, entries, extract, features, health, info
from service.catalog.sqlite import SqliteCatalog
from service.extraction.extractor import Extractor
from service.library import FeatureLibrary
from service.model.loader import LoadedModel, load_model
from service.model.revision_cache import cached_model_revision
from service.settings import Settings
from service.storage.zarr_local import LocalZarrStore

log = logging.getLogger("hsstore")


def load_configured_model(settings: Settings) -> LoadedModel | None:
    if settings.model_dir is None:
        return None
    revision = cached_model_revision(settings.model_dir, settings.data_dir / "model_revisions.json")
    return load_model(settings.model_dir, revision, settings.device, settings.attn_implementation)


def build_library(settings: Settings, loaded: LoadedModel | None = None) -> FeatureLibrary:
    store = LocalZarrStore(settings.data_dir, settings.chunk_tokens, settings.write_pause_s)
    catalog = SqliteCatalog(settings.catalog_path)
    loaded = loaded or load_configured_model(settings)
    extractor = (
        Extractor(loaded, settings.max_sample_tokens, settings.target_ids_chunk, settings.batch_tokens)
        if loaded
        else None
    )
    return FeatureLibrary(
        store, catalog, extractor, settings.default_backend, settings.writer_threads, settings.verify_reads
    )


def create_app(settings: Settings | None = None, loaded: LoadedModel | None = None) -> FastAPI:
    settings = settings or Settings()
    library = build_library(settings, loaded)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        library.close()

    app = FastAPI(title="hsstore", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.library = library
    app.state.metrics = library.metrics
    error_handlers.install(app)
    for module in (health, info, extract, features, entries, compare, audit, metrics_api):
        app.include_router(module.router)
    app.add_middleware(metrics_api.MetricsMiddleware, metrics=library.metrics)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    return app
