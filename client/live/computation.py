"""The one call a trainer holding the target uses to compute features exactly as a stored entry of that model, backend
and featureset was computed, in its own process, with no service: the model's own forward of the sequence alone
(`compute/forward.py`'s `ForwardPlan`: layer L is decoder layer L's output, full attention on the pinned kernel, the
heads in chunks of `HEAD_CHUNK` tokens), the plan the service's extractor runs. The service gives every sequence
those bits in its packs by construction, so on the GPU type and library versions an entry's fingerprint names, the
tensors are the stored ones bit for bit (`check_backends` compares them).

    from client import compute_features
    live = compute_features(model, features.input_ids, features.manifest.featureset)
    torch.equal(live["hidden_states"].cpu(), features.hidden_states)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from client.errors import MixedBackendsError
from compute.forward import ForwardPlan
from compute.kernel_binding import live_backend
from schemas.backend import PINNED_ATTENTION, AttentionKernel
from schemas.featureset import FeatureSet


def compute_features(
    model: Any,
    input_ids: Sequence[int] | torch.Tensor,
    featureset: FeatureSet | None = None,
    backend: str | None = None,
    attention: AttentionKernel | None = PINNED_ATTENTION,
) -> dict[str, torch.Tensor]:
    """The tensors a stored entry of `featureset` (the model's default, DFlash's layers, when None) holds for these
    token ids (prompt then completion), on the model's device, named and typed as stored: `hidden_states` [T, L, H]
    (float8 beside `hidden_scales` for an fp8 featureset), `input_ids`, and what the featureset takes from the logits.
    `backend`: the entries' backend, refused (MixedBackendsError) unless this process's kernels run it. `attention`:
    the entries' `fingerprint.attention_kernel` (None for entries from before the pin: torch's choice)."""
    live = live_backend(model)
    if backend is not None and backend != live:
        raise MixedBackendsError(
            f"this process runs the target with {live} kernels; entries of backend {backend} were computed with "
            "others, so their bits differ"
        )
    body = model.model  # the decoder stack: embed_tokens, layers, norm
    if featureset is None:
        featureset = FeatureSet.default_for(len(body.layers))
    device = body.embed_tokens.weight.device
    ids = torch.as_tensor(input_ids, dtype=torch.long).to(device).reshape(1, -1)
    plan = ForwardPlan.of(featureset, len(body.layers))
    with torch.inference_mode():
        hidden, normed = plan.capture(body, ids, attention)
        heads = plan.heads(model.get_output_embeddings(), normed[0] if normed is not None else None)
        return {"input_ids": ids[0].to(torch.int32), **heads, **plan.stored(hidden[0])}
