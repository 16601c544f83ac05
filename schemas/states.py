"""The closed vocabularies of states and sources that travel in manifests and API answers."""

from __future__ import annotations

from enum import StrEnum


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
    REPRODUCED = "reproduced"
    MISMATCH = "mismatch"


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
