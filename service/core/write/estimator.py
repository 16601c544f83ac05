"""What extracting a set of samples would take, before a GPU is committed: tokens (tokenised with the chat template,
as extraction will), bytes per featureset and dtype (compressed by the ratio this store measured on stored entries
of the featureset, or the codec table's figure before there are any), and GPU-hours at the rate this service's jobs
recorded (or one given)."""

from __future__ import annotations

from math import prod

from schemas.codecs import MEASURED_RATIO, StoreCodec
from schemas.estimates import EstimateReport, EstimateRequest, RecipeCost
from schemas.featureset import FeatureSet, union_of
from schemas.keys import EntryFilter
from schemas.tensors import DTYPES
from service.catalog.protocol import Jobs, VersionCatalog
from service.core.gpu_time.gate import configured
from service.core.write.prepare import RequestPreparer
from service.errors import InvalidRequest
from service.model.loader import ModelSpec
from service.storage.protocol import Blobs

_SAMPLED_ENTRIES = 64  # stored entries a ratio is measured on
_INT32, _FLOAT32, _UINT8 = 4, 4, 1


def _hidden_bytes_per_token(featureset: FeatureSet, hidden_size: int) -> int:
    """hidden_states, plus an fp8 featureset's float32 scale per layer."""
    layers = len(featureset.layers)
    value = DTYPES[featureset.dtype][0]
    return layers * hidden_size * value + (layers * _FLOAT32 if featureset.dtype == "float8_e4m3fn" else 0)


def _head_bytes_per_token(featureset: FeatureSet) -> int:
    """target_ids, and a top-k featureset's ids, log-probabilities and retained mass."""
    top_k = featureset.top_k or 0
    return (_INT32 if featureset.target_ids else 0) + (top_k * (_INT32 + _FLOAT32) + _FLOAT32 if top_k else 0)


class Estimator:
    def __init__(
        self,
        spec: ModelSpec | None,
        preparer: RequestPreparer,
        versions: VersionCatalog,
        store: Blobs,
        jobs: Jobs,
        codec: StoreCodec,
    ) -> None:
        self.spec = spec  # None on a replica without a model: nothing to estimate with
        self.preparer = preparer
        self.versions = versions
        self.store = store
        self.jobs = jobs
        self.codec = codec

    def estimate(self, request: EstimateRequest) -> EstimateReport:
        """With `recipes`, the report is for their union (one extraction), and each recipe's own cost beside it."""
        spec = configured(self.spec)
        if request.recipes is not None and request.featureset is not None:
            raise InvalidRequest("give a featureset or recipes, not both")
        try:
            asked = union_of(request.recipes) if request.recipes is not None else request.featureset
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        prepared = self.preparer.prepare(spec, request.samples, asked, request.backends)
        featureset, hidden_size = prepared.featureset, int(spec.config.hidden_size)
        counts = []  # per sample: its tokens, and whether it has a completion (and so a loss mask)
        for sample in prepared.samples:
            encoded = sample.encoded
            completion = (
                len(encoded.completion_ids) if encoded.completion_ids is not None else encoded.greedy_max_new_tokens
            ) or 0
            counts.append((len(encoded.prompt_ids) + completion, completion > 0))
        tokens = sum(count for count, _ in counts)
        backends = len(prepared.backends)
        rate, rate_source = self._rate(request.tokens_per_s)
        gpu_hours = tokens * backends / rate / 3600 if rate else None  # one forward per sample and backend

        def cost(of: FeatureSet) -> tuple[int, float, str, int]:
            per_token = _hidden_bytes_per_token(of, hidden_size) + _INT32 + _head_bytes_per_token(of)
            raw = backends * sum(count * (per_token + (_UINT8 if masked else 0)) for count, masked in counts)
            ratio, source = self._ratio(of)
            return raw, ratio, source, round(raw / ratio)

        raw, ratio, ratio_source, stored = cost(featureset)
        recipes = []
        for recipe in request.recipes or []:
            recipe_raw, _, _, recipe_stored = cost(recipe)
            recipes.append(
                RecipeCost(
                    featureset_id=recipe.id,
                    layers=list(recipe.layers),
                    raw_bytes=recipe_raw,
                    stored_bytes=recipe_stored,
                    gpu_hours=gpu_hours,
                )
            )
        return EstimateReport(
            samples=len(prepared.samples),
            tokens=tokens,
            backends=[b.value for b in prepared.backends],
            featureset_id=featureset.id,
            dtype=featureset.dtype,
            bytes_per_token=_hidden_bytes_per_token(featureset, hidden_size) + _INT32,
            raw_bytes=raw,
            compression_ratio=ratio,
            compression_ratio_source=ratio_source,
            stored_bytes=stored,
            tokens_per_s=rate,
            tokens_per_s_source=rate_source,
            gpu_hours=gpu_hours,
            recipes=recipes,
        )

    def _ratio(self, featureset: FeatureSet) -> tuple[float, str]:
        """Raw over stored bytes of up to 64 stored entries of the featureset; the codec table's figure without."""
        raw = stored = counted = 0
        for manifest in self.versions.find(EntryFilter(featureset_id=featureset.id), limit=_SAMPLED_ENTRIES):
            try:
                stored += self.store.stored_bytes(manifest.content_hash)
            except (KeyError, OSError):
                continue
            raw += sum(prod(t.shape) * DTYPES[t.dtype][0] for t in manifest.tensors.values())
            counted += 1
        if counted and stored:
            return raw / stored, f"measured on {counted} stored entries of this featureset"
        measured = MEASURED_RATIO.get((self.codec, featureset.dtype))
        if measured is None:
            return 1.0, f"not measured for {self.codec} and {featureset.dtype}: no compression assumed"
        return measured, f"the codec table ({self.codec}, {featureset.dtype}, 27B target's entries)"

    def _rate(self, given: float | None) -> tuple[float | None, str]:
        if given is not None:
            return given, "given"
        jobs = [job for job in self.jobs.list_jobs(limit=100) if job.busy_s > 0 and job.tokens > 0]
        if not jobs:
            return None, "no job has recorded its rate here yet: give tokens_per_s"
        rate = sum(job.tokens for job in jobs) / sum(job.busy_s for job in jobs)
        return rate, f"recorded by this service's last {len(jobs)} jobs"
