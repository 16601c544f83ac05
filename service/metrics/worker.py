"""A worker's /metrics: it has no API, so prometheus_client's own HTTP server serves its registry."""

from __future__ import annotations

from prometheus_client import start_http_server

from service.core.gpu_time.windows import Windows
from service.extraction.extractor import Extractor
from service.host.memory_budget import MemoryBudget
from service.metrics.counters import Metrics
from service.metrics.operator import HostCollector, MemoryCollector
from service.model.manager import ModelManager


def serve_worker(
    metrics: Metrics,
    windows: Windows,
    models: ModelManager[Extractor] | None,
    memory: MemoryBudget,
    host: str,
    port: int,
) -> None:
    """Serve on `port` (a thread of prometheus_client's) the worker's GPU time and its own counters (tokens extracted,
    write waits, SGLang canary mismatches) and its host memory; the queue and the store are the service's to report."""
    metrics.registry.register(HostCollector(windows, models))
    metrics.registry.register(MemoryCollector(memory))
    start_http_server(port, addr=host, registry=metrics.registry)
