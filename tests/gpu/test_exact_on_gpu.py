"""At the 27B width (hidden 5,120 and the 27B's head counts; 12 layers, three of them full attention; random weights),
for every backend and for the FP8 target: what the service stores and serves for sequences of 3 to 16,384 tokens
(multiples of 64 and not; one filling a pack, the rest sharing packs) is the model's own forward of each sequence
alone, `model(input_ids, output_hidden_states=True)` with full attention pinned to FlashAttention, bit for bit; an
entry from before the pin (attention left to torch: cuDNN's here) is reproduced by the audit under torch's choice and
is the plain forward's under it; the heads are `compute_features`' (the trainer's
call: the forward's lm_head in chunks of 1,024 tokens); and a fresh process computing them with `compute_features`
gets the stored bits. The tiny model's test proves nothing here: its GEMMs give the same rows at any M, and these do
not. Run on the device: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from client.live.computation import compute_features
from compute.forward import attention_pinned
from compute.tensors import to_torch
from schemas.api import ExtractRequest
from schemas.backend import PINNED_ATTENTION, AttentionKernel, Backend
from schemas.featureset import FeatureSet
from schemas.samples import parse_sample
from service.main import build_services
from service.model.fp8_weights import gemm_counts
from service.model.loader import LoadedModel
from service.model.synthetic import QWEN3_5_27B, build_synthetic, to_fp8
from service.settings import Settings
from tests.conftest import REPO
from tests.gpu.conftest import give_back
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla", "causal_conv1d")
# full attention at 3, 7 and 11 (every fourth): in a pack, the first layer of each kind runs eagerly, the second is
# recorded as a CUDA graph and the rest are replayed (service/extraction/layer_graphs.py), so both kinds' replays
# are held here
LAYERS = 12
# 9 and 3 tokens: fewer than 16 means in a norm (3 in the 4-head k_norm too), run again at their own rows (own_rows.py)
LENGTHS = [64, 129, 200, 333, 700, 900, 1500, 1777, 2048, 3001, 4097, 16384, 9, 3]
FEATURES = FeatureSet(layers=["embed", 0, 1, 3, 5, 7, 10, 11, "final_norm"], target_ids=True, top_k=4)
PACK = 16384


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, QWEN3_5_27B["vocab_size"], (n,), generator=torch.Generator().manual_seed(seed)).tolist()


SEQUENCES = [_ids(n, seed) for seed, n in enumerate(LENGTHS)]


def _plain(
    loaded: LoadedModel, ids: list[int], backend: Backend, attention: AttentionKernel | None = PINNED_ATTENTION
) -> torch.Tensor:
    """The model's own forward of the sequence alone, as transformers runs it with `backend`'s kernels bound and full
    attention on `attention`'s kernel: the featureset's layers [T, L, H] (the last layer's raw output, which HF's
    tuple replaces by the final norm's, from a hook)."""
    model = loaded.model
    seen: list[torch.Tensor] = []
    hook = model.model.layers[LAYERS - 1].register_forward_hook(
        lambda _m, _a, out: seen.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        with torch.inference_mode(), loaded.kernels.running(backend), attention_pinned(attention):
            out = model(input_ids=torch.tensor([ids], device="cuda"), output_hidden_states=True, use_cache=False)
    finally:
        hook.remove()
    hf = out.hidden_states  # embed, layers 0 .. LAYERS - 2, then the final norm's output
    layers = [hf[0], hf[1], hf[2], hf[4], hf[6], hf[8], hf[11], seen[0], hf[LAYERS]]
    return torch.stack([h[0] for h in layers], dim=1)


def _stored(services: Any, backend: Backend) -> list[dict[str, torch.Tensor]]:
    request = ExtractRequest(samples=[{"token_ids": ids} for ids in SEQUENCES], featureset=FEATURES, backend=backend)
    results = services.writer.extract(request).results
    extractor = services.models.extractor()
    assert {r.manifest.fingerprint.batching for r in results} == {extractor.pack_policy.describe()}
    replayed = services.settings.cuda_graphs is True  # what ran is named either way, and replays did run where asked
    assert all(r.manifest.fingerprint.cuda_graphs is replayed for r in results)
    assert (extractor.graphs is not None and extractor.graphs.replays > 0) is replayed
    return [{n: to_torch(t) for n, t in services.reader.read(r.manifest).tensors.items()} for r in results]


def _assert_model_own_forward(loaded: LoadedModel, services: Any, backend: Backend) -> list[dict[str, torch.Tensor]]:
    stored = _stored(services, backend)
    for ids, entry in zip(SEQUENCES, stored, strict=True):
        plain = _plain(loaded, ids, backend).cpu()
        hidden = entry["hidden_states"]
        equal = (hidden.view(torch.int16) == plain.view(torch.int16)).float().mean(dim=(0, 2))
        assert bool((equal == 1).all()), (backend.value, len(ids), [round(float(e), 4) for e in equal])
        with loaded.kernels.running(backend):
            live = compute_features(loaded.model, ids, FEATURES)
        for name in ("target_ids", "topk_ids", "topk_logprobs", "topk_mass", "input_ids"):
            assert torch.equal(live[name].cpu(), entry[name]), (backend.value, len(ids), name)
    return stored


@pytest.fixture(scope="module")
def bf16(tmp_path_factory: pytest.TempPathFactory):
    loaded = build_synthetic("cuda", num_layers=LAYERS)
    store = tmp_path_factory.mktemp("exact") / "store"
    # layers replayed from CUDA graphs (the default, named here) for every backend; the FP8 target runs both ways below
    services = build_services(Settings(data_dir=store, device="cuda", pack_tokens=PACK, cuda_graphs=True), loaded)
    yield loaded, services
    services.close()


@pytest.mark.parametrize("backend", list(Backend))
def test_stored_features_are_the_models_own_forward_at_the_27b_width(bf16, backend: Backend, tmp_path: Path) -> None:
    loaded, services = bf16
    stored = _assert_model_own_forward(loaded, services, backend)
    if backend is not Backend.FLA:
        return
    # a trainer's fresh process (fla tunes its kernels anew there) computes the same bits with compute_features
    picked = [2, 9]  # 200 and 3,001 tokens
    script = textwrap.dedent(
        f"""
        import sys, torch
        sys.path.insert(0, {str(REPO)!r})
        from client.live.computation import compute_features
        from schemas.featureset import FeatureSet
        from service.model.synthetic import build_synthetic
        from tests.gpu.test_exact_on_gpu import FEATURES, SEQUENCES
        loaded = build_synthetic("cuda", num_layers={LAYERS})
        out = [compute_features(loaded.model, SEQUENCES[i], FEATURES)["hidden_states"].cpu() for i in {picked}]
        torch.save(out, {str(tmp_path / "live.pt")!r})
        """
    )
    give_back()  # the allocator's free blocks, which this process would keep from the trainer's
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    for index, live in zip(picked, torch.load(tmp_path / "live.pt"), strict=True):
        assert torch.equal(live, stored[index]["hidden_states"]), LENGTHS[index]


def test_an_entry_from_before_the_pin_is_reproduced_under_torchs_choice(bf16) -> None:
    """What an audit of an entry whose fingerprint names no attention kernel runs: attention left to torch (cuDNN's
    here), alone in its pack, the plain forward's bits under torch's choice."""
    loaded, services = bf16
    extractor, spec = services.models.extractor(), services.models.spec
    for index in (2, 9):  # 200 and 3,001 tokens
        encoded = spec.encode(parse_sample({"token_ids": SEQUENCES[index]}), PACK)
        policy = extractor.pack_policy.describe()
        old = extractor.extract(encoded, FEATURES, Backend.FLA, "before the pin", policy, attention=None)
        assert old.fingerprint.attention_kernel is None
        (hidden,) = [to_torch(t) for t in old.tensors if t.name == "hidden_states"]
        plain = _plain(loaded, SEQUENCES[index], Backend.FLA, attention=None).cpu()
        assert torch.equal(hidden.view(torch.int16), plain.view(torch.int16)), LENGTHS[index]


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_the_fp8_targets_stored_features_are_its_own_forward_at_the_27b_width(
    bf16, cuda_graphs: bool, tmp_path: Path
) -> None:
    loaded, _ = bf16
    if not gemm_counts(loaded.model):  # the first of the module's last tests converts: the model stays FP8
        assert to_fp8(loaded)
    assert list(gemm_counts(loaded.model)) == ["scaled-mm-blockwise"]
    settings = Settings(data_dir=tmp_path / "fp8", device="cuda", pack_tokens=PACK, cuda_graphs=cuda_graphs)
    services = build_services(settings, loaded)
    try:
        _assert_model_own_forward(loaded, services, Backend.FLA)
    finally:
        services.close()
