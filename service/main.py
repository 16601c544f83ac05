"""The composition root: builds every service once from one settings object and hands each what it needs; the app
factory makes one app per object graph, so tests build one per temporary store."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from schemas.featureset import FeatureSet
from service import __version__
from service.api import error_handlers, openapi
from service.api import metrics as metrics_api
from service.api.body_limit import BodyLimit
from service.api.routes import ROUTERS
from service.api.status_page import mount_status_page
from service.catalog import KeyValue
from service.catalog.protocol import Database
from service.core.gpu_time.gate import ExtractionGate
from service.core.gpu_time.windows import Windows
from service.core.model_revisions import model_revision_for
from service.core.read.datasets import Datasets
from service.core.read.reader import FeatureReader
from service.core.startup import startup_lines
from service.core.trust.auditor import Auditor
from service.core.trust.import_checks import ImportChecks, SpotCheckLimits
from service.core.trust.importer import FeatureImporter
from service.core.trust.rebuild import CatalogRebuilder
from service.core.trust.verifier import Verifier
from service.core.write.canary import Canaries
from service.core.write.content_checks import ContentChecks, ContentLimits
from service.core.write.estimator import Estimator
from service.core.write.prepare import RequestPreparer, planned_by_the_card, sample_tokens_limit
from service.core.write.recorder import Recorder
from service.core.write.writer import FeatureWriter
from service.errors import ConfigError
from service.extraction.extractor import Extractor
from service.extraction.layer_graphs import graph_recorder, layer_mode
from service.extraction.memory_plan import GIB, ROW_STEP
from service.host.allocator import bound_heap
from service.host.handover import HandoverLedger
from service.host.memory_budget import MemoryBudget
from service.host.sglang import SGLangClient
from service.jobs.queue import JobQueue
from service.jobs.runner import JobRunner
from service.metrics.counters import Metrics
from service.metrics.operator import HostCollector, MemoryCollector, QueueCollector
from service.metrics.store import StoreCollector
from service.model.loader import LoadedModel, ModelSpec, load_spec, load_weights
from service.model.manager import ModelManager
from service.registry import build_catalog, build_handover, build_store, check_data_dir
from service.services import Services
from service.settings import Settings

log = logging.getLogger("hsstore")


def build_models(
    settings: Settings,
    kv: KeyValue,
    loaded: LoadedModel | None = None,
    on_event: Callable[[str], None] | None = None,
    writable: bool = True,
    on_sglang_mismatch: Callable[[], None] = lambda: None,
) -> ModelManager[Extractor] | None:
    if loaded is None and settings.model_dir is None:
        return None
    if loaded is not None:
        spec = loaded.spec
    else:
        assert settings.model_dir is not None
        cache = settings.data_dir / "model_revisions.json"
        revision = model_revision_for(settings.model_dir, kv, cache, settings.run_jobs, writable)
        spec = load_spec(settings.model_dir, revision, settings.device)
    if loaded is None and settings.preload:
        loaded = load_weights(spec, settings.attn_implementation, settings.device)
    return ModelManager(
        spec,
        lambda model: build_extractor(settings, model),
        build_handover(settings, on_sglang_mismatch),
        HandoverLedger(settings.data_dir / "handover.json"),
        attn_implementation=settings.attn_implementation,
        devices=settings.device,
        idle_unload_s=settings.idle_unload_s,
        memory_wait_s=settings.memory_wait_s,
        preloaded=loaded if (settings.preload or loaded is not None) else None,
        on_event=on_event,
        loads_weights=settings.run_jobs or loaded is not None,
    )


def build_extractor(settings: Settings, model: LoadedModel) -> Extractor:
    """The extractor of a loaded model: its layer mode for this device, and on a GPU its memory plan for the default
    backend worked out now, at load (ConfigError where the card holds no pack of the model's default featureset)."""
    mode, why = layer_mode(settings.cuda_graphs, model)
    extractor = Extractor(model, settings.fused_elementwise, settings.pack_tokens, graph_recorder(model, mode), why)
    log.info("layers: %s (%s)", mode.value, why)
    plan = extractor.plan(model.spec.resolve_backend(settings.default_backend)).memory
    featureset = FeatureSet.default_for(model.num_layers)
    if plan is not None and plan.rows_that_fit(featureset) < ROW_STEP:
        raise ConfigError(
            f"pack_tokens: {model.device} has {plan.free / GIB:.1f} GiB free after the weights and a pack needs "
            f"{plan.per_row * ROW_STEP / GIB:.1f} GiB per {ROW_STEP} rows plus {plan.fixed / GIB:.1f} GiB: no pack "
            f"of the default featureset fits (free the GPU, or spread the model over more: device=cuda:0,cuda:1)"
        )
    return extractor


def build_memory_budget(settings: Settings, spec: ModelSpec | None, in_flight: int) -> MemoryBudget:
    """The host memory budget: the writer's entries in flight counted at the longest sample it takes (on a GPU
    whose limit is the card's, a pack's rows: a longer one runs alone, the rarer case) under the default featureset."""
    if spec is None:  # a replica: it writes no extractions
        return MemoryBudget(0, 0, 0)
    limit = settings.max_sample_tokens
    tokens = settings.pack_tokens if planned_by_the_card(limit, spec) else sample_tokens_limit(limit, spec)
    values = len(FeatureSet.default_for(spec.num_layers).layers) * int(spec.config.hidden_size)
    return MemoryBudget(in_flight, tokens, values)


@dataclass
class StoreAdmin:
    """What the admin verbs on a store build (`hsstore rebuild-catalog`, `verify`): its blobs and catalog and the
    two services over them; no model, writer or jobs."""

    database: Database
    rebuilder: CatalogRebuilder
    verifier: Verifier

    def close(self) -> None:
        self.database.close()


def build_store_admin(settings: Settings) -> StoreAdmin:
    database, versions, _, kv = build_catalog(settings, read_only=False)
    store = build_store(settings, read_only=False)
    return StoreAdmin(database, CatalogRebuilder(store, versions), Verifier(store, versions, kv))


def build_services(
    settings: Settings, loaded: LoadedModel | None = None, on_event: Callable[[str], None] | None = None
) -> Services:
    read_only = settings.store_read_only
    if read_only and settings.model_dir is not None:
        raise ValueError("read_only: a service with a model extracts and so writes; give read_only only to replicas")
    check_data_dir(settings.data_dir, create=not read_only)
    # before the service's threads start: an arena bound holds for arenas made after it
    heap = bound_heap(settings.heap_bounded)
    database, versions, job_store, kv = build_catalog(settings, read_only)
    store = build_store(settings, read_only)
    log.info("heap: %s", heap)  # once the catalog and the store opened: a start that fails says one line, its error
    windows = Windows(settings.windows, kv, settings.windows_enforced, settings.window_margin_s)
    metrics = Metrics()
    models = build_models(
        settings, kv, loaded, on_event, writable=not read_only, on_sglang_mismatch=metrics.sglang_canary_mismatches.inc
    )
    gate = ExtractionGate(models, windows)
    spec = models.spec if models is not None else None
    preparer = RequestPreparer(settings.default_backend, sample_tokens_limit(settings.max_sample_tokens, spec))
    reader = FeatureReader(store, versions, settings.verify_reads)
    checks = ContentChecks(versions, settings.group(ContentLimits, "content_"))
    canaries = Canaries(kv) if settings.canary else None
    spot_checks = ImportChecks(models, kv, versions, settings.group(SpotCheckLimits, "import_spot_check_"))
    recorder = Recorder(store, versions)
    writer = FeatureWriter(
        recorder,
        versions,
        models,
        gate,
        preparer,
        checks,
        canaries,
        extracted_tokens=metrics.extracted_tokens,
        write_waits=metrics.write_wait_seconds,
        writer_threads=settings.writer_threads,
    )
    memory = build_memory_budget(settings, spec, writer.max_in_flight)
    if models is not None:
        models.on_event = memory.following(models.on_event)
    verifier = Verifier(store, versions, kv)
    runner = None
    if models is not None and settings.run_jobs:
        sglang = SGLangClient(settings.sglang_url) if settings.sglang_url else None
        runner = JobRunner(
            writer,
            job_store,
            models,
            windows,
            preparer,
            sglang,
            batch_size=settings.job_batch_size,
            keep_gpu_s=settings.window_keep_gpu_s,
            on_event=on_event,
            # stable across restarts of this service (so a restart frees at once what a killed run held)
            worker=settings.worker_name or f"{socket.gethostname()}:{settings.data_dir.resolve()}",
            lease_s=settings.lease_s,
        )
    return Services(
        settings=settings,
        database=database,
        store=store,
        versions=versions,
        jobs=job_store,
        windows=windows,
        models=models,
        preparer=preparer,
        metrics=metrics,
        memory=memory,
        reader=reader,
        recorder=recorder,
        writer=writer,
        auditor=Auditor(reader, writer, versions, models, gate, preparer, verifier, spot_checks),
        verifier=verifier,
        datasets=Datasets(
            reader.resolve, versions, store, kv, spool_dir=None if read_only else settings.data_dir / "tmp"
        ),
        estimator=Estimator(spec, preparer, versions, store, job_store, settings.codec),
        importer=FeatureImporter(
            recorder, versions, models, checks, spot_checks, sample_tokens_limit(settings.max_sample_tokens, spec)
        ),
        rebuilder=CatalogRebuilder(store, versions),
        queue=JobQueue(job_store, spec, windows, preparer),
        runner=runner,
    )


def create_app(
    settings: Settings | None = None,
    loaded: LoadedModel | None = None,
    on_event: Callable[[str], None] | None = None,
) -> FastAPI:
    settings = settings or Settings()
    if settings.exposed_without_auth:
        raise ConfigError(
            f"refusing to serve {settings.host} without auth: anyone who reaches it could read and write; set tokens "
            "(HSSTORE_TOKENS), or allow_anonymous = true (HSSTORE_ALLOW_ANONYMOUS) if that is meant"
        )
    services = build_services(settings, loaded, on_event)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for line in startup_lines(services.settings, services.models, services.store, services.windows):
            log.info("%s", line)
        with services.running():
            yield

    app = FastAPI(
        title="hsstore",
        version=__version__,
        summary="A hidden-state feature store: verified, versioned features keyed by prompt, model and backend",
        lifespan=lifespan,
        docs_url=None,  # served from local assets below: GPU hosts have no internet
        redoc_url=None,
    )
    app.state.services = services  # what the routes' dependencies take their services from (api/deps.py)
    error_handlers.install(app)
    openapi.mount_docs(app)
    mount_status_page(app, __version__, bool(services.settings.tokens))
    spec = services.models.spec if services.models is not None else None
    vocab_size, num_layers = (spec.vocab_size, spec.num_layers) if spec is not None else (None, None)
    openapi.document_app(app, vocab_size, num_layers, services.settings.window_margin_s)
    for router in ROUTERS:
        app.include_router(router)
    app.state.methods_by_path = error_handlers.methods_by_path(ROUTERS)
    app.add_middleware(metrics_api.MetricsMiddleware, metrics=services.metrics)
    # what each scrape reads: the store, the queue, and this host's GPU time where it runs jobs
    registry = services.metrics.registry
    registry.register(StoreCollector(services.versions, services.store))
    registry.register(QueueCollector(services.jobs))
    registry.register(MemoryCollector(services.memory))
    if services.runner is not None:
        registry.register(HostCollector(services.windows, services.models))
    limits = {
        "/v1/jobs": services.settings.max_job_bytes,
        "/v1/datasets": services.settings.max_job_bytes,  # up to 200,000 keys
        "/v1/entries:import": services.settings.max_import_bytes,
    }
    app.add_middleware(BodyLimit, max_bytes=services.settings.max_request_bytes, overrides=limits)
    app.add_middleware(error_handlers.CatchAll)  # outermost: whatever escapes still answers with the envelope
    return app
