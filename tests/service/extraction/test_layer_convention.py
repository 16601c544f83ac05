"""Layer L served == HF `hidden_states[L+1]` bit for bit; the last layer's raw output, embed and final_norm too."""

from __future__ import annotations

import httpx
import pytest
import torch

from client import FeatureClient
from compute.forward import ForwardPlan
from schemas.featureset import FeatureSet
from service.model.loader import LoadedModel

ALL_LAYERS = list(range(8))


def hf_hidden_states(loaded: LoadedModel, ids: list[int]) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    return out.hidden_states


def test_served_layers_equal_hf_hidden_states_bitwise(client: FeatureClient, tiny_loaded: LoadedModel) -> None:
    sample = {"messages": [{"role": "user", "content": "Write merge sort in Python."}]}
    featureset = FeatureSet(layers=["embed", *ALL_LAYERS, "final_norm"])
    client.extract([sample], featureset=featureset)
    features = client.get(sample, featureset=featureset)
    served = features.hidden_states
    hf = hf_hidden_states(tiny_loaded, features.input_ids.tolist())
    assert len(hf) == 9  # embed + 8 layers, the last one post-norm
    assert torch.equal(served[:, 0], hf[0][0])
    for layer in range(7):
        assert torch.equal(served[:, 1 + layer], hf[layer + 1][0]), f"layer {layer}"
    # transformers 5.x: the tuple's last element is the post-norm output, i.e. final_norm, not layer 7's raw output
    assert torch.equal(served[:, 9], hf[8][0])
    assert not torch.equal(served[:, 8], hf[8][0])
    normed = tiny_loaded.body.norm(served[:, 8].unsqueeze(0))[0]
    assert torch.equal(normed, served[:, 9])


def test_default_featureset_is_dflash_layers(http: httpx.Client) -> None:
    info = http.get("/v1/info").json()
    assert info["default_featureset"]["layers"] == [1, 2, 3, 4, 5]  # build_target_layer_ids(8, 5)


def test_lean_forward_stops_after_the_last_needed_layer(tiny_loaded: LoadedModel) -> None:
    ran: list[int] = []
    handles = [
        layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
        for i, layer in enumerate(tiny_loaded.body.layers)
    ]
    try:
        with torch.inference_mode():
            hidden, normed = ForwardPlan.of(FeatureSet(layers=[1, 3]), len(tiny_loaded.body.layers)).capture(
                tiny_loaded.body, torch.tensor([[5, 6, 7, 8]])
            )
    finally:
        for handle in handles:
            handle.remove()
    assert ran == [0, 1, 2, 3]
    assert hidden.shape == (1, 4, 2, 64) and normed is None


def test_target_ids_are_the_argmax_of_full_logits(client: FeatureClient, tiny_loaded: LoadedModel) -> None:
    sample = {"text": "def binary_search(items, target):"}
    featureset = FeatureSet(layers=[2], target_ids=True)
    client.extract([sample], featureset=featureset)
    features = client.get(sample, featureset=featureset)
    with torch.inference_mode():
        logits = tiny_loaded.model(input_ids=features.input_ids.long().unsqueeze(0), use_cache=False).logits[0]
    assert torch.equal(features.target_ids, logits.argmax(-1).to(torch.int32))


@pytest.mark.parametrize(
    "completion", [{"text": " return -1"}, {"token_ids": [11, 12, 13]}, {"greedy": {"max_new_tokens": 5}}]
)
def test_completion_gets_a_loss_mask(client: FeatureClient, tiny_loaded: LoadedModel, completion: dict) -> None:
    sample = {"messages": [{"role": "user", "content": "search"}], "completion": completion}
    result = client.extract([sample]).results[0]
    features = client.get(sample)
    m = result.manifest
    assert m.num_tokens == m.prompt_tokens + m.completion_tokens and m.completion_tokens > 0
    mask = features.loss_mask
    assert mask is not None and mask.tolist() == [0] * m.prompt_tokens + [1] * m.completion_tokens
    if "token_ids" in completion:
        assert features.input_ids[-3:].tolist() == [11, 12, 13]
    if "greedy" in completion:
        assert m.completion_source == "greedy:target"
        with torch.inference_mode():
            prompt = features.input_ids[: m.prompt_tokens].long().unsqueeze(0)
            generated = tiny_loaded.model.generate(
                prompt, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(prompt)
            )
        assert features.input_ids.tolist() == generated[0].tolist()
