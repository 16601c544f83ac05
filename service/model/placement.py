"""A model bigger than one GPU: its decoder layers spread in contiguous runs over several devices (embeddings and the
rotary table on the first, the final norm and lm_head on the last), each layer taking its inputs on its own device.
transformers' `device_map` does the same through accelerate's hooks; this is the part of it a forward needs, with no
extra dependency, and it works on a model already loaded (so the same weights can be compared placed both ways).

Whether a split model gives the single-device bits is measured on the 2-GPU machine (`benchmarks/workers.py`), and
every manifest's fingerprint names the placement (`device_map`), so entries from a split model are never mistaken
for single-device ones.
"""

from __future__ import annotations

from math import ceil
from typing import Any

import torch


def devices_of(setting: str) -> list[torch.device]:
    """`cuda:0,cuda:1` → both devices; any single setting → itself (`auto`: cuda if present)."""
    if "," not in setting:
        if setting == "auto":
            return [torch.device("cuda" if torch.cuda.is_available() else "cpu")]
        return [torch.device(setting)]
    return [torch.device(part.strip()) for part in setting.split(",") if part.strip()]


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, tuple):
        return tuple(_to(v, device) for v in value)
    if isinstance(value, list):
        return [_to(v, device) for v in value]
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def _inputs_on(module: torch.nn.Module, device: torch.device) -> None:
    def move(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if device.type == "cuda":
            torch.cuda.set_device(device)  # Triton kernels (fla's, ours) launch on the current device
        return _to(args, device), _to(kwargs, device)

    module.register_forward_pre_hook(move, with_kwargs=True)


def spread_layers(model: Any, devices: list[torch.device]) -> str:
    """Place a causal LM's decoder over `devices`; returns the placement as fingerprints record it."""
    body = model.model
    layers = body.layers
    per_device = ceil(len(layers) / len(devices))
    runs = []
    for index, device in enumerate(devices):
        first, last = index * per_device, min(len(layers), (index + 1) * per_device) - 1
        if first > last:
            break
        for layer in layers[first : last + 1]:
            layer.to(device)
            _inputs_on(layer, device)
        runs.append(f"layers {first}-{last} on {device}")
    body.embed_tokens.to(devices[0])
    body.rotary_emb.to(devices[0])
    for tail in (body.norm, model.lm_head):
        tail.to(devices[-1])
        _inputs_on(tail, devices[-1])
    torch.cuda.set_device(devices[0]) if devices[0].type == "cuda" else None
    return "; ".join(runs)
