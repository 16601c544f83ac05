"""The target's top-k next-token distribution stored beside the hidden states, and how to compare a student with it.

The service keeps, per token, the k most likely next tokens, their log-probabilities under the target's softmax over
the *whole* vocabulary, and the mass those k hold together (`mass` = sum of their probabilities, at most 1). Two
normalisations are consistent, and mixing them is the bug to avoid (MaxText once normalised the teacher over its
top-k and the student over the full vocabulary, so the loss could never reach zero):

- **renormalised** (the default): the teacher over its k tokens, p_i / mass, against the student's logits softmaxed
  over the same k tokens (`student_log_probs(..., renormalise=True)`);
- **as stored**: the teacher's full-vocabulary probabilities of the k tokens (summing to `mass`), against the student's
  full-vocabulary log-softmax at those tokens; the missing 1 - mass is then simply left out of the sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TopK:
    ids: torch.Tensor  # int64 [T, k], most likely first
    logprobs: torch.Tensor  # float32 [T, k], log-probabilities over the whole vocabulary
    mass: torch.Tensor  # float32 [T], the probability the k hold together

    def log_probs(self, renormalise: bool = True) -> torch.Tensor:
        """[T, k] log-probabilities: over the k tokens (renormalised: each row's probabilities sum to 1), or as
        stored (over the whole vocabulary: each row sums to `mass`)."""
        if not renormalise:
            return self.logprobs
        return self.logprobs - self.mass.log().unsqueeze(-1)

    def probs(self, renormalise: bool = True) -> torch.Tensor:
        return self.log_probs(renormalise).exp()


def student_log_probs(student_logits: torch.Tensor, topk: TopK, renormalise: bool = True) -> torch.Tensor:
    """The student's log-probabilities [T, k] at the teacher's k tokens, normalised as the teacher's are: over the
    same k tokens (renormalise=True) or over the student's whole vocabulary (False). `student_logits`: [T, V]."""
    import torch

    if renormalise:
        return torch.log_softmax(student_logits.float().gather(-1, topk.ids), dim=-1)
    return torch.log_softmax(student_logits.float(), dim=-1).gather(-1, topk.ids)


def kl_to_student(student_logits: torch.Tensor, topk: TopK, renormalise: bool = True) -> torch.Tensor:
    """Per-token KL(teacher || student) on the teacher's top-k support, both sides normalised the same way ([T])."""
    teacher = topk.log_probs(renormalise)
    return (teacher.exp() * (teacher - student_log_probs(student_logits, topk, renormalise))).sum(dim=-1)
