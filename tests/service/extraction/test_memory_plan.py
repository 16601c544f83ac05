"""The memory plan (service/extraction/memory_plan.py): its arithmetic from calibration peaks, and the service obeying
a plan on any host (#61). The calibration itself runs on CUDA only (tests/gpu/test_memory_plan_on_gpu.py holds it at
the 27B width on the card that comes); here a plan is placed where the calibration would put it, forcing each
outcome: an own-rows pack cut to the rows that fit (named so in the fingerprint, the bits unchanged), a sample longer
than the card holds refused in one line naming the limit (a 413, nothing stored), `/v1/info` saying the plan."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from schemas.backend import Backend
from schemas.featureset import FeatureSet
from service.extraction import extractor as extractor_module
from service.extraction.memory_plan import GIB, MARGIN, ROW_STEP, MemoryPlan
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer
from tests.service.api.test_bad_input import assert_error, stored_state

H100 = {"total": 80 * GIB, "free": 28 * GIB, "hidden_size": 5120, "vocab_size": 248320, "configured_rows": 16384}


def test_a_plan_is_the_line_through_its_calibration_peaks() -> None:
    per_row, fixed = 1_200_000, 3 * GIB  # a pack on a card that holds a little less than 16,384 rows
    plan = MemoryPlan.from_peaks({2048: fixed + 2048 * per_row, 4096: fixed + 4096 * per_row}, **H100)
    assert (plan.per_row, plan.fixed) == (per_row, fixed)
    default = FeatureSet.default_for(64)
    rows = plan.rows_that_fit(default)
    assert rows % ROW_STEP == 0 and 0 < rows < 16384
    spent = fixed * MARGIN + plan.headroom + rows * (per_row * MARGIN + 2 * 5120 * 2 * 4)
    assert spent <= plan.free < spent + ROW_STEP * (per_row * MARGIN + 2 * 5120 * 2 * 4)  # the most rows that fit
    assert plan.pack_rows(default) == rows == plan.longest_sequence(default)
    every = FeatureSet(layers=["embed", *range(64), "final_norm"], target_ids=True, top_k=16)
    assert plan.rows_that_fit(every) < rows  # more layers stored and the heads' logits: fewer rows
    roomy = MemoryPlan.from_peaks({2048: fixed + 2048 * 300_000, 4096: fixed + 4096 * 300_000}, **H100)
    assert roomy.pack_rows(default) == 16384 < roomy.longest_sequence(default)  # the configured shape where it fits
    replayed = MemoryPlan.from_peaks(
        {2048: fixed + 2048 * per_row, 4096: fixed + 4096 * per_row}, **H100, replayed=True
    )
    assert replayed.rows_that_fit(default) < rows // 5  # layers replayed: their graph pools take rows too
    full = MemoryPlan.from_peaks({2048: 30 * GIB, 4096: 31 * GIB}, **H100)
    assert full.rows_that_fit(default) == 0  # nothing fits: the composition root refuses to start


def test_no_measured_peak_lies_above_the_plan() -> None:
    """A passing peak in one calibration pack (a kernel's first call) or a peak growing faster than its rows must not
    flatten the slope: the plan takes the steepest neighbouring slope, through the highest peak against it."""
    per_row, fixed, default = 183_000, GIB // 2, FeatureSet.default_for(64)
    line = {rows: fixed + rows * per_row for rows in (2048, 4096, 8192)}
    inflated_first = {**line, 2048: line[2048] + 250_000_000}
    steeper_late = {**line, 8192: line[8192] + 4096 * 60_000}
    for peaks, slope in [(inflated_first, per_row), (steeper_late, per_row + 60_000)]:
        plan = MemoryPlan.from_peaks(peaks, **H100)
        assert plan.per_row == slope
        assert all(plan.fixed + rows * plan.per_row >= peak for rows, peak in peaks.items()), (plan, peaks)
    steeper = MemoryPlan.from_peaks(steeper_late, **H100).longest_sequence(default)
    assert steeper < MemoryPlan.from_peaks(line, **H100).longest_sequence(default)


@pytest.fixture
def planned(settings: Settings, tiny_loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """A live service with CPU packs of 16,384 rows asked for, and a plan for the torch backend (the CPU's) where a
    pack of the default featureset holds 1,024 rows: what the calibration would find on a card that small."""
    monkeypatch.setattr(extractor_module, "PACKING_DEVICES", frozenset({"cuda", "cpu"}))
    app = create_app(settings.model_copy(update={"pack_tokens": 16384}), tiny_loaded)
    featureset = FeatureSet.default_for(tiny_loaded.num_layers)
    geometry = {"hidden_size": tiny_loaded.config.hidden_size, "vocab_size": tiny_loaded.config.vocab_size}
    stored = 2 * geometry["hidden_size"] * 2 * (len(featureset.layers) - 1)
    per_row = 100_000
    free = int(GIB + (ROW_STEP + 10) * (per_row * MARGIN + stored))  # 1,024 rows and change
    plan = MemoryPlan(8 * GIB, free, per_row, 0, configured_rows=16384, headroom=GIB, **geometry)
    assert plan.pack_rows(featureset) == ROW_STEP == plan.longest_sequence(featureset)
    extractor = app.state.services.models.extractor()
    extractor.memory._plans[Backend.TORCH] = plan  # where the calibration puts what it measured
    with LiveServer(app) as url:
        yield url, app


def test_packs_are_cut_to_the_plan_and_longer_samples_refused_naming_the_limit(
    planned: tuple[str, Any], settings: Settings
) -> None:
    url, _ = planned
    response = httpx.post(f"{url}/v1/extract", json={"samples": [{"token_ids": [5] * 300}]}, timeout=120)
    assert response.status_code == 200, response.text
    batching = response.json()["results"][0]["manifest"]["fingerprint"]["batching"]
    assert batching.startswith("own-rows packs of 1024 tokens")  # cut from the 16,384 asked for, and named so
    before = stored_state(settings)
    too_long = httpx.post(f"{url}/v1/extract", json={"samples": [{"token_ids": [5] * 1100}]}, timeout=120)
    assert_error(too_long, 413, "1100 tokens exceed the limit of 1024 tokens per sample that this GPU holds")
    assert stored_state(settings) == before
    memory = httpx.get(f"{url}/v1/info").json()["run"]["memory"]
    assert (memory["pack_tokens"], memory["longest_sequence"]) == (1024, 1024)
