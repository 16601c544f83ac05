"""The backend table is the one description of the backends: every backend has its row, every row's mix of fast
kernels names it back, and the help texts list what the table holds."""

from __future__ import annotations

from schemas.backend import AUTO, BACKENDS, SPECS, Backend, backend_for_fast, backends_described, backends_help


def test_every_backend_has_one_row_and_its_kernels_name_it_back() -> None:
    assert [spec.backend for spec in BACKENDS] == list(Backend)
    assert set(SPECS) == set(Backend)
    for spec in BACKENDS:
        assert backend_for_fast(set(spec.fast)) == spec.backend
    assert not BACKENDS[-1].fast  # the last runs anywhere: `auto` always finds one
    assert backend_for_fast({"conv"}) is None  # causal-conv1d with torch's rule is no backend


def test_help_texts_come_from_the_table() -> None:
    assert backends_help() == "fla, fla-noconv or torch"
    assert backends_help(with_auto=True) == f"{AUTO}, fla, fla-noconv or torch"
    assert (
        backends_described().startswith("fla: fla's gated delta rule")
        and "torch: torch reference" in backends_described()
    )
