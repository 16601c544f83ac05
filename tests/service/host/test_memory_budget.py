"""The host memory budget a service states (service/host/memory_budget.py): `/v1/info`'s `host_memory` and the two
gauges of a real `hsstore serve` process say the same budget, made of its level at load and the parts that may grow,
and the process stays under it while it extracts samples of many lengths."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from schemas.featureset import FeatureSet
from schemas.host_memory import HostMemory
from service.host import memory_budget
from service.host.memory_budget import CACHE_SHARE, MIB, MemoryBudget, resident_bytes
from service.settings import WRITER_THREADS
from tests.conftest import ServerProcess


def _gauge(scraped: str, name: str) -> float:
    (line,) = [line for line in scraped.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_a_served_process_states_its_budget_and_stays_under_it_while_extracting(
    server_process: Callable[..., ServerProcess], tiny_model_dir: Path, tmp_path: Path
) -> None:
    env = {
        "HSSTORE_DATA_DIR": str(tmp_path / "store"),
        "HSSTORE_MODEL_DIR": str(tiny_model_dir),
        "HSSTORE_DEVICE": "cpu",
    }
    server = server_process(env).start()
    with httpx.Client(base_url=server.url, timeout=120) as http:
        info = http.get("/v1/info").json()
        stated = HostMemory.model_validate(info["host_memory"])
        model = info["model"]
        values = len(FeatureSet.default_for(model["num_layers"]).layers) * model["hidden_size"]
        # the writer's entries in flight at the CPU's longest sample (32,768 tokens), bfloat16
        assert stated.entry_tokens == 32768
        in_flight = 2 * WRITER_THREADS * 32768 * values * 2
        assert stated.parts_mib["writes_in_flight"] == round(in_flight / MIB, 1)
        assert stated.parts_mib["caches_and_rounding"] == pytest.approx(stated.at_load_mib * CACHE_SHARE, abs=0.1)
        assert stated.budget_mib == pytest.approx(stated.at_load_mib + sum(stated.parts_mib.values()), abs=0.2)
        assert 0 < stated.at_load_mib <= stated.resident_mib < stated.budget_mib

        rng = random.Random(0)
        for _ in range(10):  # 40 sequences, each of a length of its own
            samples = [{"token_ids": [rng.randrange(5, 1000) for _ in range(rng.randint(16, 2048))]} for _ in range(4)]
            assert http.post("/v1/extract", json={"samples": samples}).status_code == 200
        after = HostMemory.model_validate(http.get("/v1/info").json()["host_memory"])
        assert after.budget_mib == stated.budget_mib and after.resident_mib < after.budget_mib, after

        scraped = http.get("/metrics").text
        assert _gauge(scraped, "hsstore_host_memory_budget_bytes") == pytest.approx(after.budget_mib * MIB, abs=MIB)
        assert 0 < _gauge(scraped, "hsstore_host_memory_resident_bytes") < after.budget_mib * MIB


def test_the_level_is_taken_again_when_the_model_loads_and_the_events_go_on() -> None:
    seen: list[str] = []
    budget = MemoryBudget(in_flight=6, entry_tokens=100, values_per_token=10, at_load=0)
    on_event = budget.following(seen.append)
    on_event("release")
    assert budget.at_load == 0  # only a load ends at a new level
    on_event("load")
    assert budget.at_load == resident_bytes() > 0 and seen == ["release", "load"]
    assert budget.parts()["writes_in_flight"] == 6 * 100 * 10 * 2


def test_where_the_process_has_no_proc_its_resident_memory_reads_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(*_: object, **__: object) -> None:
        raise FileNotFoundError("/proc/self/statm")

    monkeypatch.setattr(memory_budget, "open", no_proc, raising=False)
    assert resident_bytes() == 0
    assert MemoryBudget(0, 0, 0).state().resident_mib == 0
