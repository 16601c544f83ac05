"""The object graph's type: every service of one process (a service, a worker, a Ray Data stage's actor), each built
once by the composition root (service/main.py) and handed only what it needs, and the one lifecycle they share. The
routes take theirs from it through service/api/deps.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from service.catalog import JobStore, VersionStore
from service.catalog.protocol import Database
from service.core.gpu_time.windows import Windows
from service.core.read.datasets import Datasets
from service.core.read.reader import FeatureReader
from service.core.trust.auditor import Auditor
from service.core.trust.importer import FeatureImporter
from service.core.trust.rebuild import CatalogRebuilder
from service.core.trust.verifier import Verifier
from service.core.write.estimator import Estimator
from service.core.write.prepare import RequestPreparer
from service.core.write.recorder import Recorder
from service.core.write.writer import FeatureWriter
from service.extraction.extractor import Extractor
from service.host.memory_budget import MemoryBudget
from service.host.python_heap import freeze_startup_heap
from service.jobs.queue import JobQueue
from service.jobs.runner import JobRunner
from service.metrics.counters import Metrics
from service.model.manager import ModelManager
from service.settings import Settings
from service.storage.protocol import BlobStore


@dataclass
class Services:
    """The object graph: each service built once, each handed only what it needs."""

    settings: Settings
    database: Database
    store: BlobStore
    versions: VersionStore
    jobs: JobStore
    windows: Windows
    models: ModelManager[Extractor] | None
    preparer: RequestPreparer
    metrics: Metrics
    memory: MemoryBudget
    reader: FeatureReader
    recorder: Recorder
    writer: FeatureWriter
    auditor: Auditor
    verifier: Verifier
    datasets: Datasets
    estimator: Estimator
    importer: FeatureImporter
    rebuilder: CatalogRebuilder
    queue: JobQueue
    runner: JobRunner | None

    def close(self) -> None:
        self.writer.close()
        self.database.close()

    @contextlib.contextmanager
    def running(self, jobs: bool = True) -> Iterator[None]:
        """The one lifecycle of a service process, a worker and a Ray Data stage's actor alike: the heap built at start
        frozen (service/host/python_heap.py), SGLang's GPU recovered from a process that died holding it, the job
        loop started (`jobs`: not for an actor, which extracts its batches only); on the way out the loop stopped,
        the model unloaded, everything closed."""
        runner = self.runner if jobs else None
        freeze_startup_heap()
        self.memory.loaded()  # the level it started at: what it imported and built, a preloaded model
        if self.models is not None:
            self.models.recover()
        if runner is not None:
            runner.start()
        try:
            yield
        finally:
            if runner is not None:
                runner.stop()
            if self.models is not None:
                self.models.unload()
            self.close()
