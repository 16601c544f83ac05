"""Features that hash fine but no model computed are refused at write time, from extraction and import alike: a
constant (all-zero) layer, a layer with many constant rows, statistics far outside the band of the key space's
earlier entries; unusual but plausible ones are stored and flagged, and reads say so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
import torch
from typer.testing import CliRunner

from client import FeatureClient, ImplausibleError
from compute.tensors import from_torch
from hsstore.cli import app as cli
from schemas import safetensors_body
from schemas.api import IMPORT_METADATA, ImportRequest
from schemas.content_hash import content_hash
from service.model.loader import LoadedModel

HIDDEN = 64  # the tiny model's


@contextmanager
def layer_output(loaded: LoadedModel, layer: int, change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """A decoder layer whose output is changed on its way out, as a broken kernel would change it."""

    def hook(_module: object, _args: object, output: object) -> object:
        if isinstance(output, tuple):
            return (change(output[0]), *output[1:])
        return change(output)  # type: ignore[arg-type]

    handle = loaded.body.layers[layer].register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _half_rows_zero(hidden: torch.Tensor) -> torch.Tensor:
    out = hidden.clone()
    out[:, : hidden.shape[1] // 2] = 0
    return out


@pytest.mark.parametrize(
    ("change", "why"),
    [(torch.zeros_like, "is constant over all"), (_half_rows_zero, "rows are constant")],
    ids=["all-zero-layer", "zero-rows"],
)
def test_extraction_refuses_features_no_model_computes(
    client: FeatureClient, tiny_loaded: LoadedModel, change: Callable, why: str
) -> None:
    sample = {"text": "def handler(event):\n    return event['body']\n" * 3}
    with layer_output(tiny_loaded, 2, change), pytest.raises(ImplausibleError, match=why):
        client.extract([sample], featureset=[1, 2])
    assert list(client.entries()) == []  # nothing was stored
    assert client.extract([sample], featureset=[1, 2]).extracted == 1  # the same sample, computed right


def post_import(http: httpx.Client, revision: str, hidden: torch.Tensor, ids: torch.Tensor) -> httpx.Response:
    """`POST /v1/entries:import` of layers [1, 3] of a prompt of token ids, its content hash computed here."""
    tensors = [from_torch("hidden_states", hidden.to(torch.bfloat16)), from_torch("input_ids", ids)]
    request = ImportRequest(
        sample={"token_ids": ids.tolist()},
        layers=[1, 3],
        model_revision=revision,
        source="test:inline",
        content_hash=content_hash(tensors),
        prompt_tokens=len(ids),
    )
    body = b"".join(safetensors_body.encode_parts(tensors, {IMPORT_METADATA: request.model_dump_json()}))
    return http.post("/v1/entries:import", content=body)


def _import(http: httpx.Client, revision: str, hidden: torch.Tensor, first_id: int) -> httpx.Response:
    ids = torch.arange(first_id, first_id + hidden.shape[0], dtype=torch.int32)
    return post_import(http, revision, hidden, ids)


def test_imports_are_refused_when_constant_and_flagged_or_refused_outside_their_band(
    http: httpx.Client, live_url: str, tiny_loaded: LoadedModel
) -> None:
    generator = torch.Generator().manual_seed(0)

    def states(scale: float = 1.0) -> torch.Tensor:
        return torch.randn((40, 2, HIDDEN), generator=generator) * scale

    # a revision this service does not run: the dump's random states are then not spot-checked against the model
    revision = tiny_loaded.revision[:-8] + ("0" * 8 if not tiny_loaded.revision.endswith("0" * 8) else "1" * 8)
    zero_layer = states()
    zero_layer[:, 1] = 0
    for refused, first_id in ((zero_layer, 10), (_half_rows_zero(states().transpose(0, 1)).transpose(0, 1), 20)):
        response = _import(http, revision, refused, first_id)
        assert response.status_code == 422 and response.json()["error"]["code"] == "implausible_features"
    calm = CliRunner().invoke(cli, ["health", "--url", live_url])
    assert calm.exit_code == 0 and "0 entries: 0 flagged" in calm.output, calm.output  # the refused left nothing
    for entry in range(16):  # the key space's band
        assert _import(http, revision, states(), 100 + 50 * entry).status_code == 200
    far = _import(http, revision, states(100.0), 900)
    assert far.status_code == 422 and "far outside its band" in far.json()["error"]["message"]
    unusual = _import(http, revision, states(3.0), 950)
    assert unusual.status_code == 200, unusual.text
    flags = unusual.json()["manifest"]["content_flags"]
    assert flags and all(flag.startswith("unusual: layer") for flag in flags)
    head = http.head(f"/v1/features/{unusual.json()['prompt_hash']}", params={"backend": "unknown"})
    assert head.status_code == 200 and "unusual: layer" in head.headers["X-Hsstore-Content-Flags"]
    listed = http.get("/v1/entries", params={"limit": 100}).json()["entries"]
    assert len(listed) == 17 and sum(bool(m["content_flags"]) for m in listed) == 1
    health = CliRunner().invoke(cli, ["health", "--url", live_url])
    assert health.exit_code == 1, health.output  # something needs an operator's eye
    assert "17 entries: 1 flagged by the content checks, 0 damaged" in health.output
    assert f"flagged {unusual.json()['prompt_hash'][:10]} unknown: unusual: layer" in health.output


def test_extraction_refuses_a_layer_far_outside_the_band_of_its_key_space(
    client: FeatureClient, tiny_loaded: LoadedModel
) -> None:
    """Once a key space holds its band (16 entries here, the default), a layer whose scale jumps 100-fold — a kernel
    gone wrong, weights loaded wrong — is refused, where the same sample computed right is stored."""
    band = [{"text": f"def step_{i}(state):\n    return state + {i}\n" * (2 + i % 3)} for i in range(16)]
    assert client.extract(band, featureset=[1, 2]).extracted == 16
    odd = {"text": "def odd(x):\n    return x * 2\n" * 3}
    with layer_output(tiny_loaded, 2, lambda hidden: hidden * 100), pytest.raises(ImplausibleError, match="band"):
        client.extract([odd], featureset=[1, 2])
    assert client.extract([odd], featureset=[1, 2]).extracted == 1
    assert len(list(client.entries())) == 17
