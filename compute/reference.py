"""The model's own forward of one sequence alone, as transformers runs it: the reference every exactness check holds
extraction to (tests/gpu/, benchmarks/identity.py). The body runs with a hook on each decoder layer asked for and
stops after the last of them, so no [T, vocab] logits and no tuple of every layer's states are ever held: at 65,536
tokens those took 32 GB and 43 GB beside the 27B's 51 GiB of weights. The layers it runs, it runs as the whole
forward does: HF `hidden_states[L+1]` is decoder layer L's output."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from compute.forward import attention_pinned
from schemas.backend import PINNED_ATTENTION, AttentionKernel


class _Enough(Exception):
    pass


def reference_layers(
    body: nn.Module, ids: Sequence[int], layers: Sequence[int], attention: AttentionKernel | None = PINNED_ATTENTION
) -> torch.Tensor:
    """Decoder layers `layers`' outputs [T, len(layers), H] on the CPU, the body's forward of `ids` alone under the
    kernels bound now and full attention on `attention`'s kernel."""
    seen: dict[int, torch.Tensor] = {}
    last = max(layers)

    def keeper(index: int) -> Callable[[nn.Module, object, object], None]:
        def keep(_module: nn.Module, _args: object, out: object) -> None:
            hidden = out[0] if isinstance(out, tuple) else out
            assert isinstance(hidden, torch.Tensor)
            seen[index] = hidden[0].cpu()
            if index == last:
                raise _Enough

        return keep

    decoder = body.get_submodule("layers")
    assert isinstance(decoder, nn.ModuleList)
    handles = [decoder[index].register_forward_hook(keeper(index)) for index in sorted(set(layers))]
    device = next(body.parameters()).device
    try:
        with torch.inference_mode(), attention_pinned(attention):
            body(input_ids=torch.tensor([list(ids)], device=device), use_cache=False)
    except _Enough:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack([seen[index] for index in layers], dim=1)
