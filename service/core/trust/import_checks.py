"""Imports checked against the model: the spot check, and which imports get it.

The spot check: where this service runs the import's model revision with the weights loaded, the model's own
features for the first `SPOT_CHECK_TOKENS` tokens must agree with the imported ones layer by layer (mean cosine at
least `cosine`, within the backends' spread), so a dump shifted by a token, another request's features or another
model's are refused however well they hash. It never loads the weights, nor takes the GPU from SGLang.

Which imports: a systematic fault sits in every file of a dump, so checking one import in 16 (by prompt hash) lets 15
in 16 through. So the first `first` imports of every import run (`ImportRequest.run`: one `hsstore import`) and of
every new source (a model revision and format never checked `first` times) are checked, then one in `every`. Once a
check fails, the rest of that run is checked one by one (refused where the weights are not loaded), and what the run
stored unchecked is marked suspect (its versions' audit; `hsstore health` lists them). Without the weights, an import
due a check, and every import of a run none of whose imports agreed yet, is stored marked unchecked; `hsstore audit
--imports` checks those once the weights are here (`check_stored`), and one that disagrees fails its run. A run's
state lives in the catalog's key/value table, so every replica sees it; two replicas importing one run at once can
each miss the other's last count, which checks more, never less.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch

from compute.tensors import to_torch
from schemas.api import ImportRequest
from schemas.backend import Backend
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter
from schemas.manifest import HIDDEN_STATES, AuditRecord, Manifest
from schemas.samples import ParsedSample, parse_sample
from schemas.states import AuditStatus
from schemas.tensors import RawTensor
from schemas.timestamps import utc_now
from service.catalog.protocol import KeyValue, VersionCatalog
from service.errors import InvalidRequest
from service.extraction.extractor import Extractor
from service.model.manager import ModelManager

SPOT_CHECK_TOKENS = 32
_PAGE = 1_000


class Why(StrEnum):
    """Why an import is spot-checked (or not)."""

    FIRST_OF_RUN = "one of its run's first imports"
    FIRST_OF_SOURCE = "one of the first imports of its model revision and format"
    SAMPLED = "sampled by prompt hash"
    RUN_FAILED = "its run failed a spot check, so each of the rest is checked"
    NOT_SAMPLED = "not sampled"


@dataclass(frozen=True, slots=True)
class Agreement:
    """The model's own features against an import's, per layer (mean cosine over the first tokens)."""

    per_layer: dict[str, float]
    backend: Backend
    needed: float

    @property
    def agrees(self) -> bool:
        return min(self.per_layer.values()) >= self.needed

    def describe(self) -> str:
        found = ", ".join(f"layer {layer}: {cosine:.3f}" for layer, cosine in self.per_layer.items())
        return f"mean cosine {found} (at least {self.needed} needed, under {self.backend.value})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an import's check found before it was stored, recorded on the version once it is."""

    status: AuditStatus  # AGREES, or UNCHECKED: due a check that could not run
    detail: str


@dataclass(frozen=True, slots=True)
class SpotCheckLimits:
    """Which imports are spot-checked against the model, and how close they must come: the `import_spot_check_*`
    settings, each field named as its setting's tail."""

    first: int
    every: int
    cosine: float


class ImportChecks:
    def __init__(
        self,
        models: ModelManager[Extractor] | None,
        kv: KeyValue,
        versions: VersionCatalog,
        limits: SpotCheckLimits,
    ) -> None:
        self.models = models
        self.kv = kv
        self.versions = versions
        self.limits = limits

    def why(self, request: ImportRequest, parsed: ParsedSample, run: dict[str, Any] | None) -> Why:
        """`run`: the state of the import's run (None: it names none)."""
        if run is not None:
            if run["failed"]:
                return Why.RUN_FAILED
            if run["checked"] < self.limits.first:
                return Why.FIRST_OF_RUN
        if self._source_checked(request) < self.limits.first:
            return Why.FIRST_OF_SOURCE
        if self.limits.every and int(parsed.prompt_hash[:8], 16) % self.limits.every == 0:
            return Why.SAMPLED
        return Why.NOT_SAMPLED

    def before_storing(
        self, request: ImportRequest, parsed: ParsedSample, featureset: FeatureSet, tensors: Mapping[str, RawTensor]
    ) -> tuple[Verdict | None, list[str]]:
        """Spot-check an import of a revision this service runs, if it is due: the verdict to record (None: not due)
        and warnings. InvalidRequest when it disagrees, or when its run failed and there are no weights to check.
        Without the weights, a due import (and every import of a run none of whose imports agreed yet) is stored
        marked unchecked, for `hsstore audit --imports` to check once they are here."""
        run = self._run(request.run) if request.run is not None else None
        why = self.why(request, parsed, run)
        models = self.models
        assert models is not None and models.spec.revision == request.model_revision  # the importer's precondition
        if not models.loaded:
            if run is not None and why is Why.RUN_FAILED:
                raise InvalidRequest(
                    f"import run {request.run} failed a spot check ({run['failed']}), so each of its imports is "
                    "checked against the model, and its weights are not loaded here now: nothing was stored (import "
                    "again once they are, or fix the dump)"
                )
            unvetted = run is not None and run["checked"] == 0
            if why is Why.NOT_SAMPLED and not unvetted:
                return None, []
            reason = why.value if why is not Why.NOT_SAMPLED else "its run has no import checked yet"
            warning = f"not spot-checked against the model ({reason}): its weights are not loaded here now"
            return Verdict(AuditStatus.UNCHECKED, warning), [warning + "; marked unchecked (hsstore audit --imports)"]
        if why is Why.NOT_SAMPLED:
            return None, []
        agreement = self.agreement(models, featureset, tensors)
        self._count_source_checked(request)
        if not agreement.agrees:
            detail = f"{request.source}: {agreement.describe()}"
            marked = self._fail_run(request.run, request.model_revision, detail) if request.run is not None else 0
            also = f"; the {marked} entries this run stored unchecked before are marked suspect" if marked else ""
            raise InvalidRequest(
                f"spot check ({why.value}): this model's own features for the first {SPOT_CHECK_TOKENS} tokens "
                f"disagree with the imported ones ({agreement.describe()}): shifted by a token, another request's, or "
                f"another model's; nothing was stored{also}"
            )
        return Verdict(AuditStatus.AGREES, agreement.describe()), []

    def after_storing(self, request: ImportRequest, manifest: Manifest, verdict: Verdict | None) -> None:
        """Record the verdict on the stored version, and count an agreeing check in its run."""
        if verdict is None:
            return
        self._record(manifest, verdict.status, verdict.detail)
        if verdict.status == AuditStatus.AGREES and request.run is not None:
            run = self._run(request.run)
            run["checked"] += 1
            self.kv.kv_set(_run_key(request.run), json.dumps(run))

    def check_stored(self, manifest: Manifest, tensors: Mapping[str, RawTensor]) -> Agreement:
        """The spot check of a stored import (`hsstore audit --imports`), its verdict recorded on the version; one
        that disagrees fails its import run as a check at import time would."""
        assert self.models is not None
        agreement = self.agreement(self.models, manifest.featureset, tensors)
        status = AuditStatus.AGREES if agreement.agrees else AuditStatus.DISAGREES
        self._record(manifest, status, agreement.describe())
        run = manifest.fingerprint.import_run
        if not agreement.agrees and run is not None:
            source = manifest.fingerprint.imported_from or "an import"
            self._fail_run(run, manifest.model_revision, f"{source}: {agreement.describe()}")
        return agreement

    def agreement(
        self, models: ModelManager[Extractor], featureset: FeatureSet, tensors: Mapping[str, RawTensor]
    ) -> Agreement:
        ids = tensors["input_ids"].numpy()[:SPOT_CHECK_TOKENS]
        encoded = models.spec.encode(parse_sample({"token_ids": ids.tolist()}), SPOT_CHECK_TOKENS)
        backend = models.spec.resolve_backend("auto")
        with models.using() as extractor:
            ours = extractor.extract(encoded, FeatureSet(layers=featureset.layers), backend, "import spot check")
        mine = to_torch(next(t for t in ours.tensors if t.name == HIDDEN_STATES)).float()
        theirs = to_torch(tensors[HIDDEN_STATES])[: len(ids)].float()
        cosines = torch.nn.functional.cosine_similarity(mine, theirs, dim=-1).mean(dim=0).tolist()
        per_layer = {str(layer): cosine for layer, cosine in zip(featureset.layers, cosines, strict=True)}
        return Agreement(per_layer, backend, self.limits.cosine)

    def _record(self, manifest: Manifest, status: AuditStatus, detail: str) -> None:
        self.versions.set_audit(
            manifest.key, manifest.content_hash, AuditRecord(status=status, audited_at=utc_now(), detail=detail)
        )

    def _fail_run(self, run_id: str, model_revision: str, detail: str) -> int:
        """Mark the run failed and what it stored without an agreeing check suspect; how many were marked."""
        run = self._run(run_id)
        run["failed"] = run["failed"] or detail
        self.kv.kv_set(_run_key(run_id), json.dumps(run))
        where, after, marked = EntryFilter(model_revision=model_revision), 0, 0
        while page := self.versions.find(where, limit=_PAGE, after_seq=after):  # a page at a time: bounded memory
            after = page[-1].seq or after
            for m in page:
                if m.fingerprint.import_run == run_id and (m.audit is None or m.audit.status == AuditStatus.UNCHECKED):
                    self._record(m, AuditStatus.SUSPECT, f"not checked; its import run failed a check: {detail}")
                    marked += 1
        return marked

    def _run(self, run: str) -> dict[str, Any]:
        found = self.kv.kv_get(_run_key(run))
        return json.loads(found) if found else {"checked": 0, "failed": None}

    def _source_checked(self, request: ImportRequest) -> int:
        return int(self.kv.kv_get(_source_key(request)) or 0)

    def _count_source_checked(self, request: ImportRequest) -> None:
        self.kv.kv_set(_source_key(request), str(self._source_checked(request) + 1))


def _run_key(run: str) -> str:
    return f"import.run.{run}"


def _source_key(request: ImportRequest) -> str:
    """A source: the model revision and the format (what an import's `source`, `format:file`, starts with)."""
    return f"import.source.{request.model_revision}.{request.source.split(':', 1)[0]}"
