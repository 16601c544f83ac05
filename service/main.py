"""The app factory: one app per settings object, so tests build one per temporary store."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import __version__
from service.api import error_handlers, openapi
from service.api import metrics as metrics_api
from service.api.body_limit import BodyLimit
from service.api.routes import audit, compare, entries, extract, features, health, info, jobs, window
from service.catalog.sqlite import SqliteCatalog
from service.errors import HsstoreError
from service.extraction.extractor import Extractor
from service.handover import CommandHandover, GpuHandover, HandoverLedger, MemorySaverHandover, NoHandover
from service.jobs.queue import JobQueue
from service.jobs.runner import JobRunner
from service.library import FeatureLibrary
from service.model.loader import LoadedModel, load_spec, load_weights
from service.model.manager import ModelManager
from service.model.revision_cache import cached_model_revision
from service.settings import Settings
from service.sglang import SGLangClient
from service.storage.zarr_local import LocalZarrStore
from service.windows import Windows

log = logging.getLogger("hsstore")


def make_handover(settings: Settings) -> GpuHandover:
    if settings.handover == "memory_saver":
        if not settings.sglang_url:
            raise ValueError("handover = memory_saver needs sglang_url")
        return MemorySaverHandover(settings.sglang_url, settings.handover_timeout_s)
    if settings.handover == "commands":
        if not (settings.sglang_stop_command and settings.sglang_start_command and settings.sglang_url):
            raise ValueError("handover = commands needs sglang_stop_command, sglang_start_command and sglang_url")
        return CommandHandover(
            settings.sglang_stop_command,
            settings.sglang_start_command,
            settings.sglang_url,
            settings.handover_timeout_s,
        )
    return NoHandover()


def build_models(
    settings: Settings, loaded: LoadedModel | None = None, on_event: Callable[[str], None] | None = None
) -> ModelManager | None:
    if loaded is None and settings.model_dir is None:
        return None
    if loaded is not None:
        spec = loaded.spec
    else:
        assert settings.model_dir is not None
        revision = cached_model_revision(settings.model_dir, settings.data_dir / "model_revisions.json")
        spec = load_spec(settings.model_dir, revision, settings.device)
    if loaded is None and settings.preload:
        loaded = load_weights(spec, settings.attn_implementation)
    return ModelManager(
        spec,
        lambda model: Extractor(
            model,
            settings.target_ids_chunk,
            settings.batch_tokens,
            settings.fused_elementwise,
        ),
        make_handover(settings),
        HandoverLedger(settings.data_dir / "handover.json"),
        attn_implementation=settings.attn_implementation,
        idle_unload_s=settings.idle_unload_s,
        memory_wait_s=settings.memory_wait_s,
        preloaded=loaded if (settings.preload or loaded is not None) else None,
        on_event=on_event,
    )


def build_library(
    settings: Settings, loaded: LoadedModel | None = None, on_event: Callable[[str], None] | None = None
) -> FeatureLibrary:
    store = LocalZarrStore(settings.data_dir, settings.chunk_tokens, settings.write_pause_s)
    catalog = SqliteCatalog(settings.catalog_path)
    return FeatureLibrary(
        store,
        catalog,
        build_models(settings, loaded, on_event),
        Windows(settings.windows, catalog, settings.windows_enforced, settings.window_margin_s),
        default_backend=settings.default_backend,
        max_sample_tokens=settings.max_sample_tokens,
        writer_threads=settings.writer_threads,
        verify_reads=settings.verify_reads,
    )


def startup_lines(settings: Settings, library: FeatureLibrary) -> list[str]:
    """What an operator needs to see when the service starts: where, which model, what it can run, where it
    keeps data, whether anyone can call it."""
    lines = [f"hsstore {__version__} listening on http://{settings.host}:{settings.port} (API docs at /docs)"]
    models = library.models
    if models is None:
        lines.append("model: none: a read-only replica, serving stored features only")
    else:
        spec = models.spec
        when = "loaded" if models.loaded else "loaded when a window opens (SGLang has the GPU until then)"
        lines.append(f"model: {spec.path} ({spec.info().architecture}, {spec.num_layers} layers), {when}")
        lines.append(f"model_revision: {spec.revision}")
        try:
            default = spec.resolve_backend(settings.default_backend).value
        except HsstoreError as exc:
            default = f"{settings.default_backend}, which this host cannot run: {exc.message}"
        lines.append(f"backends this host can run: {', '.join(spec.available_backends())} (default {default})")
    lines.append(f"data dir: {settings.data_dir.resolve()}")
    if settings.tokens:
        lines.append(f"auth: on ({len(settings.tokens)} bearer tokens)")
    else:
        lines.append("auth: off (no tokens configured: whoever reaches this port can read and write)")
    if library.windows is not None and library.windows.enforced:
        schedule = "; ".join(settings.windows) or "manual only"
        lines.append(f"extraction windows: {schedule}; hand-over: {settings.handover}")
    else:
        lines.append("extraction windows: none (the GPU is always this service's)")
    return lines


def create_app(
    settings: Settings | None = None,
    loaded: LoadedModel | None = None,
    on_event: Callable[[str], None] | None = None,
) -> FastAPI:
    settings = settings or Settings()
    library = build_library(settings, loaded, on_event)
    catalog = library.catalog
    runner = None
    if library.models is not None and library.windows is not None:
        sglang = SGLangClient(settings.sglang_url) if settings.sglang_url else None
        runner = JobRunner(
            library,
            catalog,
            library.models,
            library.windows,
            sglang,
            batch_size=settings.job_batch_size,
            on_event=on_event,
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for line in startup_lines(settings, library):
            log.info("%s", line)
        if library.models is not None:
            library.models.recover()  # a previous process may have died holding SGLang's GPU
        if runner is not None:
            runner.start()
        try:
            yield
        finally:
            if runner is not None:
                runner.stop()
            if library.models is not None:
                library.models.unload()
            library.close()

    app = FastAPI(
        title="hsstore",
        version=__version__,
        summary="A hidden-state feature store: verified, versioned features keyed by prompt, model and backend",
        lifespan=lifespan,
        docs_url=None,  # served from local assets below: GPU hosts have no internet
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.library = library
    app.state.metrics = library.metrics
    app.state.jobs = JobQueue(library, catalog)
    error_handlers.install(app)
    openapi.mount_docs(app)
    for module in (health, info, extract, features, entries, compare, audit, jobs, window, metrics_api):
        app.include_router(module.router)
    app.add_middleware(metrics_api.MetricsMiddleware, metrics=library.metrics)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes, overrides={"/v1/jobs": settings.max_job_bytes})
    app.add_middleware(error_handlers.CatchAll)  # outermost: whatever escapes still answers with the envelope
    return app
