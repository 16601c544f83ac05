"""fla's Triton kernels pick their launch configs by timing them (autotuning), per key and per process: a pack's
varlen call and a sequence's own call have separate keys (the varlen one names cu_seqlens' dtype), so they tune apart
and pick apart (on the H100: chunk_fwd_kernel_o BK 128 alone, 64 in a pack). The stored bits are the model's own
forward only if no config fla may pick changes them. At the 27B's head shape (16 query/key heads, 48 value heads,
128 x 128), every autotuned kernel of the gated delta rule is pinned to each of its configs in turn, the others to
their first, and the rule's output over a pack of 4 sequences and over each alone is held equal, bit for bit, to the
first configs'. Run on the device: python -m pytest -m gpu tests/gpu/test_fla_configs_on_gpu.py"""

from __future__ import annotations

import gc
import types
from typing import Any

import torch
import torch.nn.functional as F

from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla")
LENGTHS = [700, 3001, 129, 64]
HEADS, VALUE_HEADS, DIM = 16, 48, 128
MOST_CONFIGS = 8  # a kernel's configs tried: all where it has so few, else evenly spread (l2norm has 25)


def _kernel_of(tuner: Any) -> tuple[str, str]:
    fn = getattr(tuner, "base_fn", None) or tuner.fn
    while not isinstance(fn, types.FunctionType):
        fn = fn.fn
    return fn.__module__, fn.__name__


def _inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator("cuda").manual_seed(0)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(shape, device="cuda", generator=generator)

    tokens = sum(LENGTHS)
    a_log = torch.log(torch.rand(VALUE_HEADS, device="cuda", generator=generator) * 15 + 1)  # as the 27B's A_log
    return {
        "q": normal(1, tokens, HEADS, DIM).to(torch.bfloat16),
        "k": normal(1, tokens, HEADS, DIM).to(torch.bfloat16),
        "v": (normal(1, tokens, VALUE_HEADS, DIM) * 0.5).to(torch.bfloat16),
        "g": -a_log.exp() * F.softplus(normal(1, tokens, VALUE_HEADS) + 1.0),  # float32, as transformers makes it
        "beta": torch.sigmoid(normal(1, tokens, VALUE_HEADS)).to(torch.bfloat16),
    }


def test_no_config_an_fla_kernel_may_pick_changes_the_gated_delta_rules_bits() -> None:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.errors import OutOfResources, PTXASError

    unlaunchable = (OutOfResources, CompileTimeAssertionFailure, PTXASError)  # the tuner skips these: never picked

    x = _inputs()
    bounds = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.long)

    def alone() -> torch.Tensor:
        outs = []
        for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            part = {name: t[:, start:end].clone() for name, t in x.items()}
            outs.append(chunk_gated_delta_rule(**part, use_qk_l2norm_in_kernel=True)[0])
        return torch.cat(outs, dim=1)

    def packed() -> torch.Tensor:
        cu = bounds.to("cuda")
        return chunk_gated_delta_rule(**x, use_qk_l2norm_in_kernel=True, cu_seqlens=cu, cu_seqlens_cpu=bounds)[0]

    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.view(torch.int16)

    alone(), packed()  # every kernel made and tuned once: the rule's tuned kernels are those that tuned a key
    tuners = [
        t for t in gc.get_objects() if isinstance(t, Autotuner) and _kernel_of(t)[0].startswith("fla.") and t.cache
    ]
    assert tuners, "no fla kernel of the rule was tuned: nothing to hold"
    configs = {id(t): list(t.configs) for t in tuners}

    def pin(tuner: Any, config: Any) -> None:
        tuner.configs, tuner.cache = [config], {}

    for tuner in tuners:
        pin(tuner, configs[id(tuner)][0])
    first_alone, first_packed = bits(alone()), bits(packed())
    assert torch.equal(first_alone, first_packed), "a pack's rule gave other bits than each sequence's own"
    changed, held = [], 0
    for tuner in tuners:
        others = configs[id(tuner)][1:]
        for config in others[:: -(-len(others) // MOST_CONFIGS)]:
            pin(tuner, config)
            try:
                same = torch.equal(bits(alone()), first_alone) and torch.equal(bits(packed()), first_packed)
            except unlaunchable:
                continue
            held += 1
            if not same:
                changed.append(f"{_kernel_of(tuner)[1]} at {config}")
        pin(tuner, configs[id(tuner)][0])
    print(f"{len(tuners)} tuned kernels, {held} other configs launched, {len(changed)} changed the bits")
    assert held, "no other config could launch: nothing was varied"
    assert not changed, f"configs that change the bits: {changed}"
