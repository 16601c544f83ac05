"""One sequence alone through the model: the forward an unpacked extraction runs, and the one the bit checks hold
the fused forwards against (bit_checks.py), so both run exactly the same code."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from compute.forward import ForwardPlan
from schemas.backend import PINNED_ATTENTION, AttentionKernel
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel


@dataclass(frozen=True, slots=True)
class TokenSequence:
    """One row of a forward: its token ids (prompt, then completion)."""

    ids: list[int]
    prompt_tokens: int
    completion_source: str | None


def heads(loaded: LoadedModel, plan: ForwardPlan, normed: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """What the featureset takes from the logits of the final norm's output `normed` (empty when nothing)."""
    return plan.heads(loaded.model.get_output_embeddings(), normed)


def forward_alone(
    loaded: LoadedModel,
    seq: TokenSequence,
    plan: ForwardPlan,
    fused: FusedForwards | None = None,
    attention: AttentionKernel | None = PINNED_ATTENTION,
    pinned: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """[T, n_layers, H] hidden states of one sequence alone, what the featureset takes from its logits (empty when
    it takes nothing), and its token ids [T] on the device. `pinned`: the ids go up from pinned memory without
    blocking, so the calling thread never waits for the GPU between sequences."""
    staged = torch.tensor([seq.ids], dtype=torch.long, pin_memory=pinned)
    ids = staged.to(loaded.device, non_blocking=True)
    with fused.applied() if fused is not None else contextlib.nullcontext():
        hidden, normed = plan.capture(loaded.body, ids, attention)
    return hidden[0], heads(loaded, plan, normed[0] if normed is not None else None), ids[0]
