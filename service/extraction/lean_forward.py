"""The lean forward: hooks on the layers a featureset needs, no lm_head logits, stop after the last needed layer.

Layer L is the raw output of decoder layer L (HF `hidden_states[L+1]`, DFlash's offset 1); `embed` is the embedding
output and `final_norm` the final RMSNorm's output. transformers 5.x puts the post-norm tensor last in
`hidden_states`, so the last layer's raw output is only reachable through a hook, which is what we use for all.
Each hook copies its layer into one preallocated [B, T, n_layers, H] buffer, so no layer output outlives its use.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from schemas.featureset import EMBED, FINAL_NORM, FeatureSet, LayerId


class _EnoughLayers(Exception):
    """Raised from the last hook we need: the rest of the stack is not run."""


def capture(body: Any, input_ids: torch.Tensor, featureset: FeatureSet) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run `body` (embed_tokens, layers, norm) on `input_ids` [B, T]. Returns the featureset's layers as
    [B, T, n_layers, H] and, when `target_ids` are wanted, the final norm's output [B, T, H]."""
    layers = list(featureset.layers)
    decoder_layers = [layer for layer in layers if isinstance(layer, int)]
    need_norm = FINAL_NORM in layers or featureset.target_ids
    last_needed: LayerId = FINAL_NORM if need_norm else (max(decoder_layers) if decoder_layers else EMBED)
    batch, tokens = input_ids.shape
    hidden_size = body.embed_tokens.embedding_dim
    out = torch.empty(
        (batch, tokens, len(layers), hidden_size), dtype=body.embed_tokens.weight.dtype, device=input_ids.device
    )
    normed: list[torch.Tensor] = []

    def hook_for(layer_id: LayerId) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            value = output[0] if isinstance(output, tuple) else output
            if layer_id in layers:
                out[:, :, layers.index(layer_id)] = value
            if layer_id == FINAL_NORM and featureset.target_ids:
                normed.append(value)
            if layer_id == last_needed and layer_id != FINAL_NORM:
                raise _EnoughLayers

        return hook

    handles = []
    try:
        if EMBED in layers or last_needed == EMBED:
            handles.append(body.embed_tokens.register_forward_hook(hook_for(EMBED)))
        for layer in decoder_layers:
            handles.append(body.layers[layer].register_forward_hook(hook_for(layer)))
        if need_norm:
            handles.append(body.norm.register_forward_hook(hook_for(FINAL_NORM)))
        with contextlib.suppress(_EnoughLayers):
            body(input_ids=input_ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return out, normed[0] if normed else None


def chunked_argmax(lm_head: torch.nn.Module, normed: torch.Tensor, chunk: int) -> torch.Tensor:
    """argmax of the next-token logits, `chunk` tokens at a time: never the full [T, vocab] logits."""
    out = torch.empty(normed.shape[0], dtype=torch.int32, device=normed.device)
    for start in range(0, normed.shape[0], chunk):
        out[start : start + chunk] = lm_head(normed[start : start + chunk]).argmax(dim=-1).to(torch.int32)
    return out
