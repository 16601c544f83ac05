"""The closed vocabularies of states and sources that travel in manifests and API answers."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

# How much of a read is checked, one vocabulary for the client's `verify` and the service's `verify_reads`: "chunks"
# each chunk against what was recorded when it was written; "full" a whole entry's content hash as well
Verify = Literal["chunks", "full"]


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # the host (not a sample) failed: see the job's error
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (JobState.QUEUED, JobState.RUNNING)


class ItemState(StrEnum):
    """One (sample, backend) of a job."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class AuditStatus(StrEnum):
    """The last check of a version against the model: an extracted one re-extracted bit for bit, an imported one's
    first tokens against the model's own features (the spot check), or none yet for an import whose run failed one."""

    REPRODUCED = "reproduced"
    MISMATCH = "mismatch"
    AGREES = "agrees"  # an import: the model's own features agree with it, layer by layer
    DISAGREES = "disagrees"  # an import: they do not (shifted by a token, another request's, another model's)
    SUSPECT = "suspect"  # an import not checked, stored by an import run whose spot check failed later
    UNCHECKED = "unchecked"  # an import due a spot check that could not run (no weights loaded then)


# imports `hsstore health` lists: found wrong, suspect by their run, or never vetted
SUSPECT_AUDITS = frozenset({AuditStatus.DISAGREES, AuditStatus.SUSPECT, AuditStatus.UNCHECKED})


class Integrity(StrEnum):
    """What the last check of a version's stored bytes found (`hsstore verify`, or an audit)."""

    INTACT = "intact"
    CORRUPT = "corrupt"


class CompletionSource(StrEnum):
    """Where an entry's completion tokens came from."""

    TEXT = "text"  # the sample's completion text, tokenised
    TOKEN_IDS = "token_ids"  # the sample's completion ids
    GREEDY_TARGET = "greedy:target"  # generated greedily by the target here
    GREEDY_SGLANG = "greedy:sglang"  # generated greedily by SGLang before the window


class ExtractStatus(StrEnum):
    EXTRACTED = "extracted"
    EXISTING = "existing"
    VERSION_ADDED = "version_added"  # re-extracted (force) and the bits differed: a new version


class Existing(StrEnum):
    """What an extraction counts as already stored for a sample: an entry of its own featureset (what `extract`
    does unless asked), or of any featureset holding it (a warm job: a union serves the reads it is warming for)."""

    SAME = "same"
    HOLDING = "holding"


class ImportStatus(StrEnum):
    IMPORTED = "imported"
    EXISTING = "existing"  # these bits were already stored under this key: nothing added
    VERSION_ADDED = "version_added"  # the key had a version with other bits: a new version


# What a bearer token may do: read features, write (extract, jobs, audits), administer (windows, run-now jobs)
TokenScope = Literal["read", "write", "admin"]
