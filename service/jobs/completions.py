"""Reference completions for warm-job samples that ask for greedy ones, fetched from SGLang while the window is shut
(SGLang up): a sample SGLang refuses gets its completion from the target instead, and a failing SGLang is asked
again only after a growing pause, never in a loop that stalls the jobs."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from schemas.states import CompletionSource
from service.catalog.jobs.records import JobRecord
from service.catalog.protocol import JobStore
from service.core.write.prepare import RequestPreparer
from service.errors import SGLangUnavailable
from service.host.sglang import SGLangClient
from service.model.loader import ModelSpec

log = logging.getLogger("hsstore.jobs")
SGLANG_BACKOFF_S = (1.0, 60.0)  # first and longest pause after SGLang failed a /generate


class CompletionPrefetcher:
    def __init__(
        self,
        jobs: JobStore,
        sglang: SGLangClient | None,
        preparer: RequestPreparer,
        spec: ModelSpec,
        look_ahead: int,
        on_event: Callable[[str], None],
    ) -> None:
        """`look_ahead`: how many pending items of a job are looked at per call."""
        self.jobs = jobs
        self.sglang = sglang
        self.preparer = preparer
        self.spec = spec
        self.look_ahead = look_ahead
        self.on_event = on_event
        self._failures = 0
        self._retry_at = 0.0
        self._suspects: set[tuple[str, int]] = set()  # (job, sample) in a /generate call that failed

    def prefetch(self, only: JobRecord | None = None) -> bool:
        """Fetch greedy completions from SGLang for pending samples that ask for them; True if any were fetched.
        Never raises for SGLang's faults: they pause the fetching (see `_failed`)."""
        if self.sglang is None or time.monotonic() < self._retry_at:
            return False
        jobs = [only] if only is not None else self.jobs.runnable_jobs(include_windowed=True)
        for job in jobs:
            items = self.jobs.pending_items(job.id, self.look_ahead, needing_completion=True)
            unique = {item.index: item for item in items}
            if not unique or not self.sglang.healthy():
                continue
            calls: list[tuple[int, list[tuple[int, list[int]]]]] = []  # (max_new_tokens, [(index, prompt ids)])
            by_length: dict[int, list[tuple[int, list[int]]]] = {}
            for index, item in unique.items():
                encoded = self.preparer.sample(self.spec, item.sample).encoded
                if encoded.greedy_max_new_tokens is None:
                    continue
                prompt = (index, encoded.prompt_ids)
                if (job.id, index) in self._suspects:  # in a call that failed: alone now, to find the one at fault
                    calls.append((encoded.greedy_max_new_tokens, [prompt]))
                else:
                    by_length.setdefault(encoded.greedy_max_new_tokens, []).append(prompt)
            calls.extend(by_length.items())
            fetched = False
            for max_new, prompts in calls:
                if not self._fetch(job, max_new, prompts):
                    break  # SGLang failed: nothing more until the pause is over
                fetched = True
            if fetched:
                self.on_event("completions")
            return fetched
        return False

    def _fetch(self, job: JobRecord, max_new: int, prompts: list[tuple[int, list[int]]]) -> bool:
        assert self.sglang is not None
        try:
            outputs = self.sglang.greedy([ids for _, ids in prompts], max_new)
        except SGLangUnavailable as exc:
            self._failed(job, prompts, exc)
            return False
        self._failures = 0
        for (index, _), output in zip(prompts, outputs, strict=True):
            self.jobs.set_completion(job.id, index, output, CompletionSource.GREEDY_SGLANG)
            self._suspects.discard((job.id, index))
        return True

    def _failed(self, job: JobRecord, prompts: list[tuple[int, list[int]]], exc: SGLangUnavailable) -> None:
        """A sample SGLang refuses on its own gets its completion from the target; a failed call with several
        samples makes each a suspect, asked alone next time. Either way SGLang is asked again only after a pause
        that doubles with each failure in a row."""
        if len(prompts) == 1:
            ((index, _),) = prompts
            log.warning("SGLang refused sample %d of job %s (%s): the target will generate it", index, job.id, exc)
            self.jobs.fall_back_to_target(job.id, index)
            self._suspects.discard((job.id, index))
        else:
            self._suspects.update((job.id, index) for index, _ in prompts)
        first, longest = SGLANG_BACKOFF_S
        self._failures += 1
        self._retry_at = time.monotonic() + min(longest, first * 2 ** (self._failures - 1))
