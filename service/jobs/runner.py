"""The background runner: takes batches of warm-job items inside open windows (or now, for run-now jobs), stops at
a batch boundary when the window closes or is about to, and hands the GPU back as soon as it has nothing to run.
While the window is shut (SGLang up) it has reference completions fetched (`CompletionPrefetcher`)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from schemas.api import ExtractResult
from schemas.featureset import FeatureSet
from schemas.manifest import Manifest
from schemas.states import CompletionSource, Existing, ExtractStatus, ItemState, JobState
from schemas.timestamps import parse as parse_time
from schemas.timestamps import utc_now
from service.catalog.jobs.records import JobItem, JobRecord
from service.catalog.protocol import JobStore
from service.core.gpu_time.windows import Windows
from service.core.write.each_sample import extract_each
from service.core.write.prepare import RequestPreparer
from service.core.write.writer import FeatureWriter
from service.extraction.extractor import Extractor
from service.host.sglang import SGLangClient
from service.jobs.completions import CompletionPrefetcher
from service.jobs.lease_holder import LeaseHolder
from service.model.manager import ModelManager

log = logging.getLogger("hsstore.jobs")
# Errors that belong to one sample: the sample fails, the job goes on. Anything else is the host's trouble.
MAX_HOST_FAILURES = 3


class JobRunner:
    def __init__(
        self,
        writer: FeatureWriter,
        jobs: JobStore,
        models: ModelManager[Extractor],
        windows: Windows,
        preparer: RequestPreparer,
        sglang: SGLangClient | None = None,
        *,
        batch_size: int = 8,
        poll_s: float = 0.25,
        keep_gpu_s: float = 0.0,
        on_event: Callable[[str], None] | None = None,
        worker: str | None = None,
        lease_s: float = 60.0,
    ) -> None:
        """`worker`: this runner's label (its leases are held by this process, `LeaseHolder`: a namesake never
        renews them); `lease_s`: how long a claim lasts without a heartbeat (renewed every third of it), so a dead
        worker's items are taken over that long after it died, or at once by its own restart."""
        self.writer = writer
        self.jobs = jobs
        self.models = models
        self.windows = windows
        self.preparer = preparer
        self.completions = CompletionPrefetcher(jobs, sglang, preparer, models.spec, batch_size * 4, self._emit)
        self.batch_size = batch_size
        self.poll_s = poll_s
        self.keep_gpu_s = keep_gpu_s  # how long a window keeps the model after its last runnable item
        self.on_event = on_event
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._host_failures: dict[str, int] = {}
        self.holder = LeaseHolder.this_process(worker or f"{socket.gethostname()}:{os.getpid()}")
        self.worker = self.holder.id  # what the job store's leases name
        self.lease_s = lease_s
        self._heartbeat: threading.Thread | None = None
        # A batch's forwards run while the previous batch's last writes finish: two batches at most in flight (the
        # extractor takes one forward at a time; its lock hands the GPU from one to the next).
        self._batches = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hsstore-batch")
        self._in_flight: deque[tuple[Future[None], JobRecord]] = deque()

    def start(self) -> None:
        self._requeue_running()  # a job a previous process was running waits for a window like any other
        self._release_predecessors()
        self._thread = threading.Thread(target=self._loop, name="hsstore-jobs", daemon=True)
        self._thread.start()
        self._heartbeat = threading.Thread(target=self._renew, name="hsstore-leases", daemon=True)
        self._heartbeat.start()

    def _release_predecessors(self) -> None:
        """What an earlier run of this worker held when it died goes back at once, rather than when its leases run
        out."""
        for lease in self.jobs.live_leases():
            holder = LeaseHolder.parse(lease.worker)
            if holder is not None and self.holder.succeeds(holder):
                self.jobs.release_leases(lease.worker)

    @property
    def alive(self) -> bool:
        """Both the job loop and the lease heartbeat are running (what a worker's health check reports)."""
        return all(t is not None and t.is_alive() for t in (self._thread, self._heartbeat))

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._heartbeat):
            if thread is not None:
                thread.join(timeout=60)
        self._collect(wait=True)
        self._batches.shutdown(wait=True)
        self.jobs.release_leases(self.worker)  # the others take at once what is left

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.jobs.renew_leases(self.worker, self.lease_s)
            except Exception:
                log.exception("renewing leases failed")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.step()
            except Exception:
                log.exception("job runner step failed")
                worked = False
            if not worked:
                self._stop.wait(self.poll_s)

    def step(self) -> bool:
        """One unit of work; False when there was nothing to do."""
        self._collect(wait=False)
        usable = self.windows.usable()
        jobs = self.jobs.runnable_jobs(include_windowed=usable)
        if not jobs:
            self._collect(wait=True)  # at a batch boundary before the GPU goes anywhere
            self._give_back(usable)
            return self.completions.prefetch() if not self.models.loaded else False
        for job in jobs:
            if not self.models.loaded and self.completions.prefetch(job):
                return True  # SGLang is still up: take its reference completions before asking it for the GPU
            if self._run_batch(job):
                return True
        self._collect(wait=True)
        return False  # what is left is leased to other workers (or to our own batch in flight, now recorded)

    def _collect(self, wait: bool) -> None:
        """Take in the batches in flight that are over (`wait`: all of them). A batch that failed for the host's
        sake (the model, the hand-over) lets the other finish first, then frees its leases and backs off."""
        while self._in_flight and (wait or self._in_flight[0][0].done()):
            future, job = self._in_flight.popleft()
            try:
                future.result()
            except Exception as exc:  # not a sample's fault (those are outcomes)
                log.exception("extraction failed")
                self._collect(wait=True)
                self.jobs.release_leases(self.worker)
                self._host_failure(job, exc)

    def _give_back(self, usable: bool) -> None:
        """Nothing to run: the GPU goes back to SGLang now (at a batch boundary), or after `keep_gpu_s` in an open
        window; where the GPU is always ours, only after the idle timeout."""
        if not self.models.loaded:
            return
        if not usable:
            self._requeue_running()  # window over: what is left waits for the next one
            self.models.give_back_if_idle()
        elif self.windows.enforced:
            self.models.give_back_if_idle(self.keep_gpu_s)
        else:
            self.models.unload_if_idle()

    def _requeue_running(self) -> None:
        for job in self.jobs.runnable_jobs(include_windowed=True):
            if job.state == JobState.RUNNING and not job.run_now:
                self.jobs.set_job_state(job.id, JobState.QUEUED)

    def _run_batch(self, job: JobRecord) -> bool:
        """Claim a batch of the job's items (one backend) and run it; False if every item left is leased to
        another worker."""
        items: list[JobItem] = []
        # batches shrink as the job drains, so that workers sharing it finish together instead of one idling
        # while another runs a last full batch
        pending = self.jobs.job_counts(job.id).get(ItemState.PENDING, 0)
        limit = max(1, min(self.batch_size, pending // 4))
        for backend in job.backends:
            items = self.jobs.claim_items(job.id, self.worker, limit, self.lease_s, backend)
            if items:
                break
        if not items:
            if not self.jobs.pending_items(job.id, 1):
                self._finish(job)
                return True
            return False
        if job.state == JobState.QUEUED:
            self.jobs.set_job_state(job.id, JobState.RUNNING, started_at=utc_now())
        self._in_flight.append((self._batches.submit(self._run_claimed, job, items), job))
        while len(self._in_flight) > 1:  # this batch's forwards overlap the previous batch's last writes
            self._collect(wait=False)
            if len(self._in_flight) > 1:
                self._in_flight[0][0].exception()  # wait for the older one, whatever its outcome
        return True

    def _run_claimed(self, job: JobRecord, items: list[JobItem]) -> None:
        """Extract and record one claimed batch (on a batch thread); a host failure propagates to `_collect`."""
        backend = items[0].backend
        featureset = FeatureSet.model_validate(job.featureset)
        started = time.monotonic()
        outcomes = self._extract(items, featureset, backend)
        self._host_failures.pop(job.id, None)
        tokens = existing = 0
        for item, outcome in outcomes:
            if isinstance(outcome, str):
                recorded = self.jobs.finish_item(item, ItemState.FAILED, error=outcome, worker=self.worker)
            else:
                digest = outcome.manifest.content_hash
                recorded = self.jobs.finish_item(item, ItemState.DONE, content_hash=digest, worker=self.worker)
                found = outcome.status == ExtractStatus.EXISTING and not _made_for(job, outcome.manifest)
                tokens += outcome.manifest.num_tokens if recorded and not found else 0
                existing += int(recorded and found)
            if not recorded:  # our lease ran out and another worker took the item: its outcome is the same entry
                log.warning("lost the lease on item %s/%s of job %s", item.index, item.backend, job.id)
        self.jobs.add_job_work(job.id, tokens, time.monotonic() - started, existing)
        if not self.jobs.pending_items(job.id, 1):
            self._finish(job)

    def _extract(
        self, items: list[JobItem], featureset: FeatureSet, backend: str
    ) -> list[tuple[JobItem, ExtractResult | str]]:
        """Each item's result, or the message of the error that refused its sample; a warm job warms reads, so what
        a stored featureset holding the job's serves is already there."""
        completions = {
            position: (item.completion_ids, CompletionSource(item.completion_source or CompletionSource.GREEDY_SGLANG))
            for position, item in enumerate(items)
            if item.completion_ids is not None
        }
        samples = [item.sample for item in items]
        places = [f"samples[{item.index}]" for item in items]  # the job's own numbering, not this batch's
        outcomes = extract_each(self.writer, samples, featureset, backend, Existing.HOLDING, completions, places)
        return list(zip(items, outcomes, strict=True))

    def _host_failure(self, job: JobRecord, exc: Exception) -> None:
        """The model or the hand-over failed, not a sample: give the GPU back, retry later, give up after a few."""
        self.models.unload()
        failures = self._host_failures.get(job.id, 0) + 1
        self._host_failures[job.id] = failures
        if failures >= MAX_HOST_FAILURES:
            error = f"{type(exc).__name__}: {exc}"
            self.jobs.set_job_state(job.id, JobState.FAILED, finished_at=utc_now(), error=error)
            self._host_failures.pop(job.id, None)
        self._stop.wait(min(30.0, self.poll_s * 4 * failures))

    def _finish(self, job: JobRecord) -> None:
        current = self.jobs.get_job(job.id)
        if current is not None and current.state.active:
            self.jobs.set_job_state(job.id, JobState.DONE, finished_at=utc_now())
        self._emit("job_done")

    def _emit(self, event: str) -> None:
        if self.on_event is not None:
            self.on_event(event)


def _made_for(job: JobRecord, manifest: Manifest) -> bool:
    """An entry found stored that was made after the job was submitted: a worker killed after writing it, before
    recording its item (or a request that extracted the same key meanwhile). Its tokens are the job's work, not
    something already stored."""
    return parse_time(manifest.created_at) >= parse_time(job.created_at)
