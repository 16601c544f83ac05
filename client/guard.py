"""The trainer-side backend guard: a trainer or eval script that runs the target live (to score a drafter, or to
compute what stored features do not hold) must run the same kernels the stored features were extracted with. The
seeds' team trained on torch-fallback features (causal-conv1d missing) and evaluated with fla: every number was off
and nothing said why. This reads which kernels transformers bound in the trainer's own process, the way the service
labels what it stores (`schemas/kernel_binding.py`), and refuses a mix before it happens.

    from client import check_backends
    check_backends(features_or_manifests, model)   # MixedBackendsError if they differ
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from client.errors import MixedBackendsError
from client.features import Features
from schemas.kernel_binding import bound_backend
from schemas.manifest import Manifest


def live_backend(model: Any, device_type: str | None = None) -> str:
    """The backend a forward of `model` runs in this process as transformers bound its kernels (`fla`,
    `fla-noconv` or `torch`); `device_type` defaults to where the model's weights are."""
    module = sys.modules[type(model).__module__]
    if device_type is None:
        device_type = next(model.parameters()).device.type
    return bound_backend(module, device_type).value


def check_backends(stored: Iterable[Features | Manifest], model: Any = None, backend: str | None = None) -> str:
    """The live backend (of `model`, or as given), once every stored entry is of that backend; else
    MixedBackendsError naming both and the entries."""
    if (model is None) == (backend is None):
        raise ValueError("give the live model or its backend")
    live = backend if backend is not None else live_backend(model)
    mismatched = []
    for item in stored:
        manifest = item.manifest if isinstance(item, Features) else item
        if manifest.backend != live:
            mismatched.append(manifest)
    if mismatched:
        stored_backends = sorted({m.backend for m in mismatched})
        examples = ", ".join(m.prompt_hash[:12] for m in mismatched[:3])
        raise MixedBackendsError(
            f"this process runs the target with {live} kernels, but {len(mismatched)} stored entries were extracted "
            f"with {', '.join(stored_backends)} (e.g. {examples}): their bits differ. Read features of backend={live}, "
            "or install what the stored backend needs (fla: flash-linear-attention and causal-conv1d) here"
        )
    return live
