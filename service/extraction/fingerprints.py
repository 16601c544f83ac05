"""What ran, as every entry's fingerprint records it: the versions, the device, the kernels the backend bound, how the
sequence shared its forward, whether layers were replayed, the elementwise chains, the quantization (docs/design.md
says which fields name the bits and which only the speed); and, for operators, which modes asked for did not run."""

from __future__ import annotations

import torch
import transformers

from schemas.backend import AttentionKernel, Backend, Fingerprint
from schemas.batching import ONE_PER_FORWARD, PackPolicy
from service.model.fp8_weights import gemm_counts
from service.model.fused import EAGER, FUSED
from service.model.kernels import version_of
from service.model.loader import LoadedModel


def fingerprint_of(
    loaded: LoadedModel,
    backend: Backend,
    fused: bool,
    pack: PackPolicy | None,
    attention: AttentionKernel | None,
    replayed: bool,
) -> Fingerprint:
    implementation = str(loaded.config._attn_implementation)
    return Fingerprint(
        torch=torch.__version__,
        transformers=transformers.__version__,
        fla=version_of("flash-linear-attention"),
        causal_conv1d=version_of("causal-conv1d"),
        device=device_name(loaded),
        dtype=str(loaded.model.dtype).removeprefix("torch."),
        attn_implementation=implementation,
        attention_kernel=attention if implementation == "sdpa" else None,  # only sdpa's kernels are pinned
        kernels=loaded.kernels.plan(backend),
        batching=pack.describe() if pack is not None else ONE_PER_FORWARD,
        cuda_graphs=replayed,
        elementwise=FUSED if fused else EAGER,
        device_map=loaded.device_map,
        quantization=quantization.describe() if (quantization := loaded.quantization) else None,
        fp8_gemm=gemm_counts(loaded.model) if quantization else None,
    )


def device_name(loaded: LoadedModel) -> str:
    """The GPU model (or `cpu`) a fingerprint names and `/v1/info` shows."""
    return torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else "cpu"


def degraded_modes(graph_failure: str | None, fusion_refusals: dict[Backend, str]) -> dict[str, str]:
    """Each mode asked for that could not run here: why, and what runs instead (`/v1/info`'s `degraded`)."""
    found = {f"elementwise:{b.value}": f"{why}; its chains run eagerly" for b, why in fusion_refusals.items()}
    if graph_failure is not None:
        found["cuda_graphs"] = f"{graph_failure}; every layer runs eagerly (the entries' fingerprints say so)"
    return found
