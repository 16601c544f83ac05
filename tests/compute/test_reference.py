"""The reference the exactness checks hold extraction to (compute/reference.py) is transformers' own forward: each
layer it returns is HF `hidden_states[L+1]` of `model(input_ids, output_hidden_states=True)`, bit for bit, though it
stops after the last layer asked for and never makes the logits."""

from __future__ import annotations

import torch

from compute.reference import reference_layers
from schemas.backend import Backend
from service.model.loader import LoadedModel


def test_the_reference_is_the_models_own_forward(tiny_loaded: LoadedModel) -> None:
    ids = torch.randint(0, 1000, (123,), generator=torch.Generator().manual_seed(1)).tolist()
    layers = [5, 0, 3]  # any order, the last not the model's last
    with torch.inference_mode(), tiny_loaded.kernels.running(Backend.TORCH):
        whole = tiny_loaded.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        ours = reference_layers(tiny_loaded.body, ids, layers, attention=None)
    expected = torch.stack([whole.hidden_states[layer + 1][0] for layer in layers], dim=1)
    assert ours.shape == (123, 3, tiny_loaded.config.hidden_size)
    assert torch.equal(ours.view(torch.int16), expected.view(torch.int16))
