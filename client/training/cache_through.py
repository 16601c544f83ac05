"""Cache-through reads (speculators' "hybrid" mode, done once): a dataset of samples whose features may not be stored
yet submits what is missing as one priority warm job before the first epoch, reads what exists, and waits only for
the sample it needs next. The service skips what is already stored (the job's `existing`), so each missing sample
is extracted exactly once, whatever the number of ranks and loader workers; a later epoch makes no extraction
request at all. The job waits for a window where the service has one (and says so), and on a cluster any worker
takes it up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from client.client import FeatureClient
from client.errors import ExtractionFailedError, NotFoundError
from client.features import Features
from client.keys import featureset_of, part_of_parts
from schemas.api import FeatureRead
from schemas.featureset import FeatureSet, LayerId
from schemas.prompt_hash import prompt_hash

OnMissing = Literal["error", "extract", "wait"]

POLL_S = 0.5  # between reads of a sample the job has not stored yet
PROGRESS_S = 10.0  # between progress lines while waiting


@dataclass(frozen=True, slots=True)
class ExtractAhead:
    """The warm job that extracts a dataset's missing samples; picklable (a DataLoader worker waits on it too)."""

    job_id: str | None  # None: another process's job (a rank other than the one that submitted it)

    @classmethod
    def submit(
        cls,
        client: FeatureClient,
        samples: Sequence[Mapping[str, Any]],
        featureset: FeatureSet,
        backend: str | None,
        priority: int,
    ) -> ExtractAhead:
        """One job over every sample, in the dataset's order (the order it will be read in, unshuffled)."""
        job = client.submit_job(samples, featureset=featureset, backends=[backend or "auto"], priority=priority)
        return cls(job.id)

    def wait(self, client: FeatureClient, sample: Mapping[str, Any], fetch: Callable[[], Features]) -> Features:
        """`fetch()` once the job has stored this sample; an error if the job can no longer store it."""
        wanted, said = prompt_hash(sample), 0.0
        while True:
            try:
                return fetch()
            except NotFoundError:
                pass
            if self.job_id is None:
                if time.monotonic() - said >= PROGRESS_S:
                    print(f"hsstore: waiting for sample {wanted[:19]}… to be stored", file=sys.stderr)
                    said = time.monotonic()
                time.sleep(POLL_S)
                continue
            status = client.job(self.job_id)
            rejected = [e.message for e in status.errors if e.prompt_hash == wanted]
            if rejected:
                raise ExtractionFailedError(f"job {self.job_id} could not extract sample {wanted[:19]}…: {rejected[0]}")
            if not status.state.active:
                try:
                    return fetch()  # stored between the read and the status
                except NotFoundError:
                    raise ExtractionFailedError(
                        f"job {self.job_id} is {status.state.value} ({status.error or 'no error given'}) and did "
                        f"not store sample {wanted[:19]}…"
                    ) from None
            if time.monotonic() - said >= PROGRESS_S:
                shut = "; the service waits for a downtime window to open" if status.waiting_for_window else ""
                print(
                    f"hsstore: waiting for job {self.job_id[:12]} to extract missing samples "
                    f"({status.done}/{status.total} stored{shut})",
                    file=sys.stderr,
                )
                said = time.monotonic()
            time.sleep(POLL_S)


class SampleReads:
    """A dataset's samples read as one featureset (`FeatureDataset` and `EntryStream` alike), with what is missing
    extracted ahead (`on_missing="extract"`: one job, submitted now, in `order`: the order of the first reads),
    waited for (`"wait"`: another process's job) or a NotFoundError (`"error"`). Picklable."""

    def __init__(
        self,
        client: FeatureClient,
        samples: Sequence[Mapping[str, Any]],
        featureset: FeatureSet | Sequence[LayerId] | None,
        backend: str | None,
        on_missing: OnMissing,
        priority: int,
        order: Sequence[int] | None = None,
    ) -> None:
        chosen = featureset_of(featureset)
        if chosen is None:
            raise ValueError("samples need a featureset: the layers (or FeatureSet) to read them as")
        self.samples = [dict(s) for s in samples]
        self.keys: list[FeatureRead] = [part_of_parts(s, backend=backend, featureset=chosen) for s in self.samples]
        self.ahead: ExtractAhead | None = None
        if on_missing == "extract":
            first = [self.samples[i] for i in order] if order is not None else self.samples
            self.ahead = ExtractAhead.submit(client, first, chosen, backend, priority)
        elif on_missing == "wait":
            self.ahead = ExtractAhead(None)

    def __len__(self) -> int:
        return len(self.samples)

    def read(self, client: FeatureClient, index: int, fetch: Callable[[], Features]) -> Features:
        """Sample `index` through `fetch()`, once it is stored where a job is extracting it."""
        if self.ahead is None:
            return fetch()
        return self.ahead.wait(client, self.samples[index], fetch)
