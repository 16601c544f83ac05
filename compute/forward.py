"""The lean forward: hooks on the layers a featureset needs, stop after the last needed layer, and the lm_head only in
chunks of `HEAD_CHUNK` tokens when the featureset asks for what the target predicts (never the full [T, vocab] logits).
It is the one definition of the computation an entry holds, run by the service (one sequence per forward, or many in
a pack that gives each the same bits) and by a trainer holding the model (`client.compute_features`).

Layer L is the raw output of decoder layer L (HF `hidden_states[L+1]`, DFlash's offset 1); `embed` is the embedding
output and `final_norm` the final RMSNorm's output. transformers 5.x puts the post-norm tensor last in
`hidden_states`, so the last layer's raw output is only reachable through a hook, which is what we use for all.
Each hook copies its layer into one preallocated [B, T, n_layers, H] buffer, so no layer output outlives its use.
Full attention runs the kernel the computation names (`AttentionKernel`), pinned around the forward, whatever torch
would pick for the shape. What a featureset asks of all this is worked out once, as a `ForwardPlan`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from compute import fp8
from schemas.backend import PINNED_ATTENTION, AttentionKernel
from schemas.featureset import EMBED, FINAL_NORM, FeatureSet, LayerId
from schemas.manifest import HIDDEN_SCALES, HIDDEN_STATES, TOPK_IDS, TOPK_LOGPROBS, TOPK_MASS

# Tokens per lm_head GEMM: part of the computation (a GEMM's rows can change with its row count), so a constant
HEAD_CHUNK = 1024
_SDPA_BACKENDS = {AttentionKernel.FLASH: SDPBackend.FLASH_ATTENTION}


class _EnoughLayers(Exception):
    """Raised from the last hook we need: the rest of the stack is not run."""


def attention_pinned(kernel: AttentionKernel | None) -> contextlib.AbstractContextManager[Any]:
    """`kernel` as the only scaled-dot-product attention kernel torch may run (it raises where that one cannot run,
    rather than running another); None leaves the choice to torch. The switch is process-wide: one forward at a time
    (the extractor's lock)."""
    return sdpa_kernel([_SDPA_BACKENDS[kernel]]) if kernel is not None else contextlib.nullcontext()


@dataclass(frozen=True)
class ForwardPlan:
    """What a featureset asks of the forward of a stack of decoder layers, worked out once and handed down: which
    outputs are hooked, where the stack stops, what the heads take from the logits and how the hidden states are
    stored. The service's extractor and a trainer's `compute_features` run the same plan, so they run one
    computation."""

    featureset: FeatureSet
    layers: tuple[LayerId, ...]  # captured, in the featureset's order
    stop_after: LayerId  # the last part of the stack that runs
    layers_run: int  # decoder layers run
    norm: bool  # the final norm runs: it is captured, or the heads read it

    @classmethod
    def of(cls, featureset: FeatureSet, num_layers: int) -> ForwardPlan:
        layers = tuple(featureset.layers)
        decoder_layers = [layer for layer in layers if isinstance(layer, int)]
        norm = FINAL_NORM in layers or featureset.needs_logits
        stop_after: LayerId = FINAL_NORM if norm else (max(decoder_layers) if decoder_layers else EMBED)
        layers_run = num_layers if stop_after == FINAL_NORM else (0 if stop_after == EMBED else int(stop_after) + 1)
        return cls(featureset, layers, stop_after, layers_run, norm)

    @property
    def quantised(self) -> bool:
        """Whether the hidden states are stored as fp8 (quantised per entry) rather than as the model computed them."""
        return self.featureset.dtype == "float8_e4m3fn"

    def capture(
        self,
        body: Any,
        input_ids: torch.Tensor,
        attention: AttentionKernel | None = PINNED_ATTENTION,
        **inputs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run `body` (embed_tokens, layers, norm) on `input_ids` [B, T] (and `inputs`: a pack's positions and masks),
        full attention on `attention`'s kernel (None: torch's choice, what entries before the pin ran). Returns the
        plan's layers as [B, T, n_layers, H] and, when the heads need it, the final norm's output [B, T, H]."""
        layers, heads = self.layers, self.featureset.needs_logits
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
                if layer_id == FINAL_NORM and heads:
                    normed.append(value)
                if layer_id == self.stop_after and layer_id != FINAL_NORM:
                    raise _EnoughLayers

            return hook

        handles = []
        try:
            if EMBED in layers or self.stop_after == EMBED:
                handles.append(body.embed_tokens.register_forward_hook(hook_for(EMBED)))
            for layer in layers:
                if isinstance(layer, int):
                    handles.append(body.layers[layer].register_forward_hook(hook_for(layer)))
            if self.norm:
                handles.append(body.norm.register_forward_hook(hook_for(FINAL_NORM)))
            with contextlib.suppress(_EnoughLayers), attention_pinned(attention):
                body(input_ids=input_ids, use_cache=False, **inputs)
        finally:
            for handle in handles:
                handle.remove()
        return out, normed[0] if normed else None

    def heads(self, lm_head: torch.nn.Module, normed: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """What the featureset takes from one sequence's next-token logits (its `normed` [T, H] through the lm_head in
        chunks); empty when it takes nothing (`normed` is None)."""
        return _chunked_heads(lm_head, normed, self.featureset) if normed is not None else {}

    def stored(self, hidden: torch.Tensor) -> dict[str, torch.Tensor]:
        """One sequence's captured layers [T, n_layers, H] as an entry stores them: `hidden_states`, as computed or
        as fp8 beside its `hidden_scales` (`compute/fp8.py`)."""
        if self.quantised:
            values, scales = fp8.quantise(hidden)
            return {HIDDEN_STATES: values, HIDDEN_SCALES: scales}
        return {HIDDEN_STATES: hidden}


def _chunked_heads(lm_head: torch.nn.Module, normed: torch.Tensor, featureset: FeatureSet) -> dict[str, torch.Tensor]:
    """What a featureset takes from the next-token logits of one sequence's `normed` [T, H], `HEAD_CHUNK` tokens at a
    time: `target_ids` (argmax, int32 [T]) and, for `top_k`, the k most likely ids (int32 [T, k]), their
    log-probabilities under the full-vocabulary softmax (float32 [T, k]) and the mass they hold (float32 [T])."""
    tokens, device, k, chunk = normed.shape[0], normed.device, featureset.top_k, HEAD_CHUNK
    out: dict[str, torch.Tensor] = {}
    if featureset.target_ids:
        out["target_ids"] = torch.empty(tokens, dtype=torch.int32, device=device)
    if k is not None:
        out[TOPK_IDS] = torch.empty((tokens, k), dtype=torch.int32, device=device)
        out[TOPK_LOGPROBS] = torch.empty((tokens, k), dtype=torch.float32, device=device)
        out[TOPK_MASS] = torch.empty(tokens, dtype=torch.float32, device=device)
    for start in range(0, tokens, chunk):
        logits = lm_head(normed[start : start + chunk])
        rows = slice(start, start + logits.shape[0])
        if featureset.target_ids:
            out["target_ids"][rows] = logits.argmax(dim=-1).to(torch.int32)
        if k is not None:
            logits = logits.float()
            values, ids = logits.topk(k, dim=-1)  # sorted: most likely first
            logprobs = values - logits.logsumexp(dim=-1, keepdim=True)
            out[TOPK_IDS][rows] = ids.to(torch.int32)
            out[TOPK_LOGPROBS][rows] = logprobs
            out[TOPK_MASS][rows] = logprobs.exp().sum(dim=-1)
    return out
