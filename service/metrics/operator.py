"""What an operator warming the cache watches, read at each scrape from what the service already keeps current: the
downtime window and its time left, the GPU's hand-over to and from SGLang, jobs by state, each active job's items,
tokens and worker-seconds (their rates are its speed and the GPU's busy share), the workers holding leases and those
whose leases ran out, and the process's host memory against its budget (the store's own gauges, reachability
included, are store.py's). Every read is a row or a
few (the jobs table's counters, the index of leased items), never a scan of entries or items. A part that cannot be
read (an outage) is left out of the scrape, and the `_up` gauge of what failed says so; the scrape always answers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from schemas.featureset import FeatureSet
from schemas.states import ItemState, JobState
from service.catalog.protocol import JobStore
from service.core.gpu_time.windows import Windows, seconds_left
from service.extraction.extractor import Extractor
from service.host.memory_budget import MemoryBudget, resident_bytes
from service.host.sglang_canary import CanaryState
from service.model.manager import ModelManager

# SGLang's canary verdicts after a window: one gauge a verdict, 1 for the last one
CANARY_VERDICTS = get_args(CanaryState)
ITEM_STATES = (ItemState.PENDING, ItemState.DONE, ItemState.FAILED)


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


class MemoryCollector(Collector):
    """This process's host memory against the budget it holds itself to (service/host/memory_budget.py)."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget

    def collect(self) -> Iterator[Metric]:
        yield _gauge("hsstore_host_memory_resident_bytes", "this process's resident memory", resident_bytes())
        yield _gauge(
            "hsstore_host_memory_budget_bytes",
            "the host memory this process holds itself to (/v1/info's host_memory: its level at load and parts)",
            self.budget.budget(),
        )


class HostCollector(Collector):
    """This host's GPU time, where the process runs jobs (a service that extracts, a worker): the window, the GPU
    held or handed to SGLang, and SGLang's canary after the last window."""

    def __init__(self, windows: Windows, models: ModelManager[Extractor] | None) -> None:
        self.windows, self.models = windows, models

    def collect(self) -> Iterator[Metric]:
        yield from self._window()
        yield from self._gpu()

    def _window(self) -> Iterator[Metric]:
        now = datetime.now(UTC)
        try:
            state = self.windows.state(now)
        except Exception:  # its manual stamps live in the catalog: an outage leaves the window unknown
            return
        left = seconds_left(state, now)
        yield _gauge("hsstore_window_open", "whether extraction may run now (a downtime window is open)", state.open)
        yield _gauge(
            "hsstore_window_seconds_left",
            "seconds until the open window closes (0 while shut or with no end)",
            max(left or 0.0, 0.0),
        )

    def _gpu(self) -> Iterator[Metric]:
        if self.models is None:  # a read replica: no model, no GPU to hold
            return
        held = self.models.loaded
        yield _gauge("hsstore_gpu_held", "whether the model is loaded (SGLang has given the GPU up)", held)
        if (extractor := self.models.current) is not None:
            help_text = "1 for each mode asked for that could not run here (/v1/info's run.degraded says why)"
            degraded = GaugeMetricFamily("hsstore_degraded", help_text, labels=["mode"])
            for mode in extractor.device_run(FeatureSet.default_for(self.models.spec.num_layers)).degraded:
                degraded.add_metric([mode], 1.0)
            yield degraded
        verdict = self.models.sglang_canary
        if verdict is None:  # no hand-over checked by the canary
            return
        help_text = "SGLang's greedy canary after the last window: 1 for its verdict"
        canary = GaugeMetricFamily("hsstore_sglang_canary", help_text, labels=["verdict"])
        for name in CANARY_VERDICTS:
            canary.add_metric([name], float(verdict == name))
        yield canary


class QueueCollector(Collector):
    """The warm-job queue as the catalog every process shares holds it (so one service's scrape shows the whole
    cluster's): jobs by state, each active job's progress, the workers' leases."""

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[Metric]:
        try:
            states, active = self.jobs.job_states(), self.jobs.runnable_jobs(True)
            counts = {job.id: self.jobs.job_counts(job.id) for job in active}
            leases, lapsed = self.jobs.live_leases(), self.jobs.lapsed_leases()
        except Exception:  # the catalog's outage: hsstore_catalog_up says so
            return
        jobs = GaugeMetricFamily("hsstore_jobs", "warm jobs by state", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], states[state])
        # `job_id`, not `job`: Prometheus gives every series its scrape job's name as `job`
        items = GaugeMetricFamily("hsstore_job_items", "an active job's items by state", labels=["job_id", "state"])
        tokens = CounterMetricFamily("hsstore_job_tokens", "tokens an active job has extracted", labels=["job_id"])
        busy = CounterMetricFamily(
            "hsstore_job_busy_seconds", "worker-seconds an active job's extraction has taken", labels=["job_id"]
        )
        for job in active:
            for item_state in ITEM_STATES:
                items.add_metric([job.id, item_state.value], counts[job.id].get(item_state, 0))
            tokens.add_metric([job.id], job.tokens)
            busy.add_metric([job.id], job.busy_s)
        yield from (jobs, items, tokens, busy)
        yield _gauge("hsstore_workers", "workers holding live leases", len({lease.worker for lease in leases}))
        yield _gauge("hsstore_leased_items", "items under live leases", sum(lease.items for lease in leases))
        lost = GaugeMetricFamily(
            "hsstore_lapsed_lease_items",
            "items whose worker's lease ran out with nobody taking them over yet (a worker lost)",
            labels=["worker"],
        )
        by_worker: Counter[str] = Counter()
        for lease in lapsed:
            by_worker[lease.worker] += lease.items
        for worker, items_lost in sorted(by_worker.items()):
            lost.add_metric([worker], items_lost)
        yield lost
