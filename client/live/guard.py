"""The trainer-side guard: a trainer or eval script that runs the target live (to score a drafter, or to compute what
stored features do not hold) must run the computation the stored features are. The seeds' team trained on
torch-fallback features (causal-conv1d missing) and evaluated with fla: every number was off and nothing said why.
This reads which kernels transformers bound in the trainer's own process, the way the service labels what it stores
(`compute/kernel_binding.py`); refuses entries whose fingerprint names a computation other than the model's own
forward (an earlier release's packs); and, given the model, computes stored entries again here
(`client.compute_features`) and compares the bits, which is what catches every other difference (another GPU type,
other library versions), before a mix happens.

    from client import check_backends
    check_backends(features_or_manifests, model)   # MixedBackendsError if they differ
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from client.errors import MixedBackendsError
from client.features import Features
from compute.kernel_binding import live_backend
from schemas.manifest import HIDDEN_STATES, Manifest


def check_backends(
    stored: Iterable[Features | Manifest], model: Any = None, backend: str | None = None, reproduce: int = 1
) -> str:
    """The live backend (of `model`, or as given), once every stored entry is of that backend and of the model's own
    forward, and (given `model`) the first `reproduce` whole entries among `stored` that carry their tensors come out
    of this process's forward bit for bit; else MixedBackendsError naming what differs and the entries."""
    if (model is None) == (backend is None):
        raise ValueError("give the live model or its backend")
    live = backend if backend is not None else live_backend(model)
    items = list(stored)
    manifests = [item.manifest if isinstance(item, Features) else item for item in items]
    mismatched = [m for m in manifests if m.backend != live]
    if mismatched:
        stored_backends = sorted({m.backend for m in mismatched})
        raise MixedBackendsError(
            f"this process runs the target with {live} kernels, but {len(mismatched)} stored entries were extracted "
            f"with {', '.join(stored_backends)} (e.g. {_examples(mismatched)}): their bits differ. Read features of "
            f"backend={live}, or install what the stored backend needs (fla: flash-linear-attention and "
            "causal-conv1d) here"
        )
    other = [m for m in manifests if not m.fingerprint.own_forward()]
    if other:
        raise MixedBackendsError(
            f"{len(other)} stored entries (e.g. {_examples(other)}) were computed as {other[0].fingerprint.batching!r}"
            ", whose bits are not the model's own forward of the sequence that this process runs: extract them "
            "again (`hsstore extract --force`, or `force` in the API)"
        )
    if model is not None:
        whole = [item for item in items if isinstance(item, Features) and _whole(item)]
        for features in whole[:reproduce]:
            _same_bits_here(features, model)
    return live


def _examples(manifests: list[Manifest]) -> str:
    return ", ".join(m.prompt_hash[:12] for m in manifests[:3])


def _whole(features: Features) -> bool:
    manifest = features.manifest
    return features.layers == list(manifest.featureset.layers) and features.tokens == (0, manifest.num_tokens)


def _same_bits_here(features: Features, model: Any) -> None:
    import torch

    from client.live.computation import compute_features
    from compute.tensors import to_torch

    manifest = features.manifest
    ran = manifest.fingerprint
    computed = compute_features(model, features.input_ids, manifest.featureset, attention=ran.attention_kernel)
    here = computed[HIDDEN_STATES].cpu()
    there = to_torch(features.tensors[HIDDEN_STATES])
    as_ints = {1: torch.uint8, 2: torch.int16}[there.element_size()]
    equal = here.view(as_ints) == there.view(as_ints)
    if bool(equal.all()):
        return
    device = next(model.parameters()).device
    here_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    raise MixedBackendsError(
        f"this process computes other bits for stored entry {manifest.prompt_hash[:12]} ({manifest.backend}): "
        f"{float(equal.float().mean()):.1%} of its hidden-state values are equal. It was extracted on {ran.device} "
        f"with torch {ran.torch}, transformers {ran.transformers}, fla {ran.fla}, causal-conv1d {ran.causal_conv1d}; "
        f"this process runs on {here_name} with torch {torch.__version__}. Train and evaluate on one computation: "
        "match the GPU type and versions, or extract with this process's setup"
    )
