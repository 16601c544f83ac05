"""A batch extracted for callers that answer per sample (a warm job's items, a Ray Data stage's rows): one request
for the batch, and where one sample spoils it, each sample alone, so the others are stored and the one at fault gets
its error's message instead of a result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.api import ExtractRequest, ExtractResult
from schemas.featureset import FeatureSet
from schemas.states import Existing
from service.core.write.writer import Completions, FeatureWriter
from service.errors import BackendUnavailable, ImplausibleFeatures, InvalidRequest, NonFiniteFeatures, TooLarge

# What refuses one sample, not the host: the batch is then run one by one
SAMPLE_ERRORS = (InvalidRequest, TooLarge, NonFiniteFeatures, ImplausibleFeatures, BackendUnavailable)
_ALONE = "samples[0]"  # how a request of one sample names it: a retry's place, not the caller's


def extract_each(
    writer: FeatureWriter,
    samples: Sequence[Any],
    featureset: FeatureSet | None,
    backend: str,
    existing: Existing = Existing.SAME,
    completions: Completions | None = None,
    places: Sequence[str] | None = None,
) -> list[ExtractResult | str]:
    """Each sample's result, or the message of the error that refused it, in order; `completions` by position;
    `places` how the caller names each sample in messages (a job's `samples[17]`, a Ray row's id), else its position
    here. Extracts now (the caller has checked the window); a host's failure (the model, the hand-over) propagates."""

    def run(positions: list[int]) -> list[ExtractResult]:
        given = {new: completions[old] for new, old in enumerate(positions) if completions and old in completions}
        request = ExtractRequest(
            samples=[samples[p] for p in positions], featureset=featureset, backend=backend, existing=existing
        )
        return writer.extract(request, run_now=True, completions=given or None).results

    everything = list(range(len(samples)))
    try:
        return list(run(everything))
    except SAMPLE_ERRORS:
        pass  # one sample spoiled the batch: find it by running them one by one
    outcomes: list[ExtractResult | str] = []
    for position in everything:
        try:
            outcomes.append(run([position])[0])
        except SAMPLE_ERRORS as exc:
            place = places[position] if places is not None else f"samples[{position}]"
            named = exc.message.startswith(_ALONE)  # the retry's own place: the caller's replaces it, as text
            outcomes.append(place + exc.message.removeprefix(_ALONE) if named else f"{place}: {exc.message}")
    return outcomes
