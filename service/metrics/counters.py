"""The counters the service's parts bump, in one registry per app (tests build many apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "hsstore_http_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "hsstore_http_request_seconds", "time to the last body byte", ["route"], registry=self.registry
        )
        self.bytes_sent = Counter(
            "hsstore_http_response_bytes", "response body bytes", ["route"], registry=self.registry
        )
        self.sglang_canary_mismatches = Counter(
            "hsstore_sglang_canary_mismatches",
            "windows after which SGLang answered the canary prompt with other greedy tokens",
            registry=self.registry,
        )
        self.extracted_tokens = Counter(
            "hsstore_extracted_tokens", "tokens extracted and stored", ["backend"], registry=self.registry
        )
        self.write_wait_seconds = Counter(
            "hsstore_extract_write_wait_seconds",
            "time the extracting thread waited on the writers: between forwards (the GPU may idle) or after the last",
            ["when"],
            registry=self.registry,
        )
