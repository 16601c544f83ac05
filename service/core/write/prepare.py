"""Preparing a request to extract, once for `POST /v1/extract` and warm jobs alike: the featureset (default, checked
against the model), the backends (`auto` resolved for this host), and every sample parsed and tokenised, so a bad one
is refused, naming it, before any work."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.backend import AUTO, Backend
from schemas.featureset import FeatureSet
from schemas.samples import InvalidSampleError, ParsedSample, parse_sample
from service.errors import InvalidRequest, InvalidSample
from service.model.encode import EncodedPrompt
from service.model.loader import ModelSpec

_BATCH = 1024  # samples a tokenizer call
CPU_SAMPLE_TOKENS = 32768  # the longest sample a CPU extracts unless told: a development device, its memory unplanned
# what the preparer lets through on a GPU unless told: the memory plan (service/extraction/memory_plan.py) then says
# what the card holds, once the model is loaded, and refuses longer samples naming that limit
PLANNED_SAMPLE_TOKENS = 1 << 20


def planned_by_the_card(setting: int | None, spec: ModelSpec | None) -> bool:
    """Whether the card's memory plan, not a number of tokens set or a CPU's, says how long a sample may be."""
    return setting is None and spec is not None and spec.device.type != "cpu"


def sample_tokens_limit(setting: int | None, spec: ModelSpec | None) -> int:
    """The most tokens a sample may have when it is prepared: the setting, else the CPU's or the plan's to judge."""
    if planned_by_the_card(setting, spec):
        return PLANNED_SAMPLE_TOKENS
    return CPU_SAMPLE_TOKENS if setting is None else setting


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
        featureset, resolved = self.targets(spec, featureset, backends)
        return Prepared(featureset, resolved, list(self.each(spec, samples, greedy_tokens)))

    def targets(
        self, spec: ModelSpec, featureset: FeatureSet | None, backends: Sequence[str]
    ) -> tuple[FeatureSet, list[Backend]]:
        """The featureset (the model's default if none) and the backends, each checked against what this host
        runs ("auto" resolved now, once)."""
        featureset = featureset or FeatureSet.default_for(spec.num_layers)
        try:
            featureset.check_against(spec.num_layers, spec.vocab_size)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        resolved: list[Backend] = []
        for name in backends:
            backend = spec.resolve_backend(name if name != AUTO else self.default_backend)
            if backend not in resolved:
                resolved.append(backend)
        return featureset, resolved

    def each(
        self, spec: ModelSpec, samples: Iterable[Any], greedy_tokens: int | None = None, batch: int = _BATCH
    ) -> Iterator[PreparedSample]:
        """Each sample validated and tokenised, in order, a batch to one tokenizer call: a job of 10^6 samples is
        prepared as it is read, never held whole."""
        pending = enumerate(samples)
        while chunk := list(itertools.islice(pending, batch)):
            parsed = [self.parsed(raw, index, greedy_tokens) for index, raw in chunk]
            encoded = spec.encode_many([p for _, p in parsed], self.max_sample_tokens, chunk[0][0])
            yield from (PreparedSample(s, p, e) for (s, p), e in zip(parsed, encoded, strict=True))

    def sample(
        self, spec: ModelSpec, raw: Any, index: int | None = None, greedy_tokens: int | None = None
    ) -> PreparedSample:
        sample, parsed = self.parsed(raw, index, greedy_tokens)
        return PreparedSample(sample, parsed, spec.encode(parsed, self.max_sample_tokens, index))

    @staticmethod
    def parsed(raw: Any, index: int | None, greedy_tokens: int | None) -> tuple[Any, ParsedSample]:
        """The sample as it is stored (a job's completion policy applied where it has none), validated."""
        sample = dict(raw) if isinstance(raw, dict) else raw
        if greedy_tokens is not None and isinstance(sample, dict) and sample.get("completion") is None:
            sample["completion"] = {"greedy": {"max_new_tokens": greedy_tokens}}
        try:
            return sample, parse_sample(sample, index)
        except InvalidSampleError as exc:
            raise InvalidSample(str(exc)) from None
