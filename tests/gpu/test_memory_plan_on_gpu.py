"""On the card that comes (an 80 GB H100 as often as an H200), the 27B target at its full 64 layers and the service's
default settings (packs of 16,384 asked for, `cuda_graphs=auto`, no sample limit set), bf16 and then FP8 (#61):

- the memory plan measured at load sizes the packs and the longest sequence to this card, and `/v1/info` says it,
  with the layer mode the table chose for this GPU model;
- a mix filling several packs and a sequence of the longest length the plan allows extract with no out-of-memory,
  every entry bit-equal to the model's own forward of its sequence alone (compute/reference.py: the body with hooks
  on the stored layers and no logits, which fits beside the weights at every length the extraction takes), and the
  fingerprint names the layer mode that ran;
- one token more is a 413 naming the limit, and nothing is stored.
Run on the device: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from compute.reference import reference_layers
from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import Backend
from schemas.device_run import LayerMode
from schemas.featureset import FeatureSet
from schemas.keys import EntryKey
from schemas.prompt_hash import prompt_hash
from service.errors import TooLarge
from service.main import build_services
from service.model.fp8_weights import gemm_counts
from service.model.loader import LoadedModel
from service.model.synthetic import QWEN3_5_27B, build_synthetic, to_fp8
from service.settings import Settings
from tests.gpu.conftest import give_back
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla", "causal_conv1d")
LAYERS = 64
FEATURES = FeatureSet.default_for(LAYERS)  # 1, 16, 31, 46, 61: DFlash's
MIX = [129, 200, 333, 700, 1777, 3001, 4097, 8191, 8193, 12000, 16383]  # a pack's worth and more, both sides of 8,192


def _ids(n: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, QWEN3_5_27B["vocab_size"], (n,), generator=generator).tolist()


def _reference(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    with loaded.kernels.running(Backend.FLA):
        return reference_layers(loaded.body, ids, [int(layer) for layer in FEATURES.layers])


@pytest.fixture(scope="module")
def target() -> Iterator[LoadedModel]:
    give_back()
    loaded = build_synthetic("cuda", num_layers=LAYERS)  # bfloat16 from the start: 51 GiB of an 80 GB card
    yield loaded


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])  # in this order: the second converts the module's model in place
def test_default_settings_fit_the_card_and_every_length_keeps_its_bits(
    target: LoadedModel, dtype: str, tmp_path: Path
) -> None:
    if dtype == "fp8" and not gemm_counts(target.model):
        to_fp8(target)
    services = build_services(Settings(data_dir=tmp_path / "store", device="cuda"), target)
    try:
        extractor = services.models.extractor()  # loaded: its plan measured at load
        run = extractor.device_run(FEATURES, Backend.FLA)
        assert run.memory is not None and run.degraded == {}, run
        longest, pack = run.memory.longest_sequence, run.memory.pack_tokens
        print(f"{dtype} on {run.device}: {run.layer_mode.value} ({run.layer_mode_reason}); {run.memory}")
        assert pack >= 8192 and longest >= 32768, run.memory  # at least what the fixed defaults promised
        sequences = [_ids(n, seed) for seed, n in enumerate([*MIX, longest])]
        request = ExtractRequest(samples=[{"token_ids": ids} for ids in sequences], featureset=FEATURES, backend="fla")
        results = services.writer.extract(request).results
        replayed = run.layer_mode is LayerMode.REPLAYED
        for ids, result in zip(sequences, results, strict=True):
            fingerprint = result.manifest.fingerprint
            assert fingerprint.batching.startswith(f"own-rows packs of {pack} tokens"), fingerprint.batching
            assert fingerprint.cuda_graphs is (replayed and len(ids) <= pack), (len(ids), fingerprint.cuda_graphs)
            stored = {n: to_torch(t) for n, t in services.reader.read(result.manifest).tensors.items()}
            reference = _reference(target, ids)
            equal = (stored["hidden_states"].view(torch.int16) == reference.view(torch.int16)).float().mean(dim=(0, 2))
            assert bool((equal == 1).all()), (dtype, len(ids), [round(float(e), 4) for e in equal])
        too_long = {"token_ids": _ids(longest + 1, 99)}
        with pytest.raises(TooLarge, match=f"exceed the limit of {longest} tokens per sample"):
            services.writer.extract(ExtractRequest(samples=[too_long], featureset=FEATURES, backend="fla"))
        key = EntryKey(prompt_hash(too_long), services.models.spec.revision, Backend.FLA.value, FEATURES.id)
        assert services.versions.versions(key) == []  # nothing stored
    finally:
        services.close()
        give_back()
