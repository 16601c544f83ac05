"""Packed forwards on the GPU, for every backend: a 1,700-token sample gets identical bits alone in its pack, among
other neighbours, and at other offsets (0, an offset after a 3,000-token neighbour, one after two); CUDA packs by
default, and its entries' audits reproduce them alone; a norm's mean over a pack is each sequence's own from 16 rows on.
Run on the device: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.batching import PackPolicy
from schemas.featureset import FeatureSet
from service.extraction.packing import plan_packs
from service.main import build_services
from service.model import fused
from service.model.devmodel import build_devmodel
from service.model.encode import EncodedPrompt
from service.settings import Settings
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla", "causal_conv1d")
FEATURES = FeatureSet(layers=["embed", 0, 3, 5, 7, "final_norm"], target_ids=True, top_k=8)
PACK = 8192


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("packing")
    model_dir = build_devmodel(root / "small", head_dim=64)
    built = build_services(Settings(data_dir=root / "store", model_dir=model_dir, device="cuda", pack_tokens=PACK))
    yield built
    built.close()


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(5, 1000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _encoded(ids: list[int]) -> EncodedPrompt:
    return EncodedPrompt(prompt_ids=ids, completion_ids=None, completion_source=None, greedy_max_new_tokens=None)


@pytest.mark.parametrize("backend", list(Backend))
def test_a_sample_keeps_its_bits_alone_with_other_neighbours_and_at_other_offsets(services, backend: Backend) -> None:
    sample = _ids(1700, 0)
    layouts = {  # the planner puts the longest first, so the neighbours' lengths set the sample's offset
        "alone": [],
        "offset 0, after it 900 + 400": [_ids(900, 1), _ids(400, 2)],
        "after a 3000": [_ids(3000, 3)],
        "after 2500 + 2100, other tokens": [_ids(2500, 4), _ids(2100, 5), _ids(64, 6)],
    }
    policy = PackPolicy(PACK)
    seen: dict[str, dict[str, torch.Tensor]] = {}
    offsets = set()
    with services.models.using() as extractor:
        for name, neighbours in layouts.items():
            sequences = [sample, *neighbours]
            (pack,) = plan_packs([len(s) for s in sequences], policy)
            offsets.add(next(s.start for s in pack.segments if s.index == 0))
            items = [(_encoded(ids), f"{name} {i}") for i, ids in enumerate(sequences)]
            done = dict(extractor.extract_many(items, FEATURES, backend))
            extraction = done[0].wait()
            assert PackPolicy.parse(extraction.fingerprint.batching) == policy
            seen[name] = {t.name: to_torch(t) for t in extraction.tensors}
    assert len(offsets) == 3  # 0 and two others
    reference = seen.pop("alone")
    for name, tensors in seen.items():
        for tensor_name, tensor in reference.items():
            assert torch.equal(tensor, tensors[tensor_name]), (backend, name, tensor_name)


def test_cuda_packs_by_default_and_audits_reproduce_packed_entries_alone(services, tmp_path: Path) -> None:
    samples = [{"token_ids": _ids(n, 10 + n)} for n in (1900, 1200, 700, 300, 2048, 64, 5000)]
    results = services.writer.extract(ExtractRequest(samples=samples, featureset=FEATURES, backend="fla")).results
    assert {r.manifest.fingerprint.batching for r in results} == {PackPolicy(PACK).describe()}
    report = services.auditor.audit(len(samples), backend="fla")
    assert (report.total, report.reproduced) == (len(samples), len(samples))


# The 27B's norms: the hidden size, q_norm's 24 and k_norm's 4 heads of 256, the gated norm's 48 heads of 128
NORM_SHAPES = {"hidden": (5120, 1), "q_norm": (256, 24), "k_norm": (256, 4), "gated": (128, 48)}


@pytest.mark.parametrize("norm", list(NORM_SHAPES))
def test_a_norms_mean_over_a_pack_is_each_sequences_own_from_16_rows_on(norm: str) -> None:
    """What lets `PackRows.row_wise` take a pack's means in one launch (own_rows.py): every row of a sequence of at
    least `ROW_WISE_MEAN_ROWS` means gets from CUDA's mean over the pack the bits of its own forward's mean over its
    rows alone (a fresh tensor), at starts aligned as packs align them."""
    columns, heads = NORM_SHAPES[norm]
    tokens = 16384
    x = torch.rand((tokens * heads, columns), device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 3
    whole = x.mean(-1, keepdim=True)
    lengths = [1, 3, 4, 9, 15, 16, 17, 63, 128, 129, 1000, 2049, 8000]
    for length in [n for n in lengths if n * heads >= fused.ROW_WISE_MEAN_ROWS]:
        for start in (0, 64 * 37, 4096):
            rows = slice(start * heads, (start + length) * heads)
            alone = x[rows].clone().mean(-1, keepdim=True)
            assert torch.equal(alone, whole[rows]), (norm, length, start)


@pytest.mark.parametrize("norm", list(NORM_SHAPES))
def test_a_one_pass_norm_over_a_pack_gives_each_sequence_its_eager_norm_alone(norm: str) -> None:
    """The one-pass norms (fused_kernels.py) over a whole pack give every sequence of at least `ROW_WISE_MEAN_ROWS`
    rows the bits of the eager module's chain over its rows alone, at the 27B's widths and at starts aligned as
    packs align them; the query norm's input every other half-row, as q_proj's output lays it out."""
    from service.model import fused_kernels

    columns, heads = NORM_SHAPES[norm]
    tokens, eps = 16384, 1e-6
    generator = torch.Generator("cuda").manual_seed(1)
    spread = torch.exp(torch.randn((tokens * heads, 1), device="cuda", generator=generator) * 2)
    strided = norm == "q_norm"
    values = torch.randn((tokens * heads, columns * (2 if strided else 1)), device="cuda", generator=generator)
    x = (values * spread).to(torch.bfloat16)[:, :columns]
    weight = (1 + torch.randn(columns, device="cuda", generator=generator) * 0.1).to(torch.bfloat16)
    gate = torch.randn((tokens * heads, columns), device="cuda", generator=generator).to(torch.bfloat16)

    def eager(part: torch.Tensor, gate_part: torch.Tensor) -> torch.Tensor:  # the modules' chains, as in transformers
        normed = part.float() * torch.rsqrt(part.float().pow(2).mean(-1, keepdim=True) + eps)
        if norm != "gated":
            return (normed * (1.0 + weight.float())).to(torch.bfloat16)
        return ((weight * normed.to(torch.bfloat16)) * torch.nn.functional.silu(gate_part.float())).to(torch.bfloat16)

    if norm == "gated":
        whole = fused_kernels.gated_norm(x.contiguous(), eps, weight, gate)
    else:
        whole = fused_kernels.rms_norm(x, eps, 1.0 + weight.float())
    lengths = [1, 3, 4, 9, 15, 16, 17, 63, 128, 129, 1000, 2049, 8000]
    for length in [n for n in lengths if n * heads >= fused.ROW_WISE_MEAN_ROWS]:
        for start in (0, 64 * 37, 4096):
            rows = slice(start * heads, (start + length) * heads)
            alone = eager(x[rows].clone(), gate[rows].clone())
            assert torch.equal(alone.view(torch.int16), whole[rows].view(torch.int16)), (norm, length, start)
    # filler rows hold whatever was in memory: NaN, infinities, the largest values, beside a sequence's rows
    for poison in (float("nan"), float("inf"), -3e38):
        for length in (129, 200, 333):
            start = 64 * 37
            rows = slice(start * heads, (start + length) * heads)
            poisoned, poisoned_gate = torch.full_like(x, poison), torch.full_like(gate, poison)
            poisoned[rows], poisoned_gate[rows] = x[rows], gate[rows]
            if norm == "gated":
                found = fused_kernels.gated_norm(poisoned.contiguous(), eps, weight, poisoned_gate)
            else:
                found = fused_kernels.rms_norm(poisoned, eps, 1.0 + weight.float())
            alone = eager(x[rows].clone(), gate[rows].clone())
            assert torch.equal(alone.view(torch.int16), found[rows].view(torch.int16)), (norm, poison, length)
