"""Preparing a request to extract, once for `POST /v1/extract` and warm jobs alike: the featureset (default, checked
against the model), the backends (`auto` resolved for this host), and every sample parsed and tokenised, so a bad one
is refused, naming it, before any work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schemas.backend import AUTO, Backend
from schemas.featureset import FeatureSet
from schemas.samples import InvalidSampleError, ParsedSample, parse_sample
from service.errors import InvalidRequest, InvalidSample
from service.model.encode import EncodedPrompt
from service.model.loader import ModelSpec


@dataclass(frozen=True, slots=True)
class PreparedSample:
    sample: dict[str, Any]  # as it is stored (with a job's completion policy applied)
    parsed: ParsedSample
    encoded: EncodedPrompt


@dataclass(frozen=True, slots=True)
class Prepared:
    featureset: FeatureSet
    backends: list[Backend]
    samples: list[PreparedSample]


class RequestPreparer:
    def __init__(self, default_backend: str = AUTO, max_sample_tokens: int = 32768) -> None:
        self.default_backend = default_backend
        self.max_sample_tokens = max_sample_tokens

    def prepare(
        self,
        spec: ModelSpec,
        samples: Sequence[Any],
        featureset: FeatureSet | None,
        backends: Sequence[str],
        greedy_tokens: int | None = None,
    ) -> Prepared:
        """`greedy_tokens`: give samples without a completion a greedy one of this many tokens (a job's policy)."""
        featureset = featureset or FeatureSet.default_for(spec.num_layers)
        try:
            featureset.check_against(spec.num_layers, spec.vocab_size)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        resolved: list[Backend] = []
        for name in backends:  # each must be one this host can run ("auto" is resolved now, once)
            backend = spec.resolve_backend(name if name != AUTO else self.default_backend)
            if backend not in resolved:
                resolved.append(backend)
        prepared = [self.sample(spec, raw, index, greedy_tokens) for index, raw in enumerate(samples)]
        return Prepared(featureset, resolved, prepared)

    def sample(
        self, spec: ModelSpec, raw: Any, index: int | None = None, greedy_tokens: int | None = None
    ) -> PreparedSample:
        sample = dict(raw) if isinstance(raw, dict) else raw
        if greedy_tokens is not None and isinstance(sample, dict) and "completion" not in sample:
            sample["completion"] = {"greedy": {"max_new_tokens": greedy_tokens}}
        try:
            parsed = parse_sample(sample, index)
        except InvalidSampleError as exc:
            raise InvalidSample(str(exc)) from None
        return PreparedSample(sample, parsed, spec.encode(parsed, self.max_sample_tokens, index))
