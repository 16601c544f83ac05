"""The /metrics route and the middleware that counts requests, bytes and latency per route (what each scrape reads
besides the counters: service/metrics/)."""

from __future__ import annotations

import time

from fastapi import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.bounded_json import resource_router
from service.api.deps import MetricsDep
from service.metrics.counters import Metrics


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]
        sent = [0]

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                sent[0] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status[0])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
            self.metrics.bytes_sent.labels(route).inc(sent[0])


router = resource_router("metrics")


@router.get("/metrics", include_in_schema=False)
def metrics(registered: MetricsDep) -> Response:
    return Response(generate_latest(registered.registry), media_type=CONTENT_TYPE_LATEST)
