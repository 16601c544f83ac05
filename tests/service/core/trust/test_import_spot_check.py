"""An import of a revision this service runs (its weights loaded) is spot-checked against the model: this model's
own features for the first tokens must agree layer by layer, so a dump shifted by one token, or another request's
features, are refused however well they hash; the model's own features pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from client import FeatureClient
from schemas.samples import parse_sample
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer
from tests.service.core.write.test_content_checks import post_import


@pytest.fixture
def spot_checked(tmp_path: Path, tiny_model_dir: Path, tiny_loaded: LoadedModel) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path / "store", model_dir=tiny_model_dir, device="cpu", import_spot_check_every=1)
    with LiveServer(create_app(settings, tiny_loaded)) as url:
        yield url


def test_a_token_shifted_dump_is_refused_and_the_models_own_features_pass(
    spot_checked: str, tiny_loaded: LoadedModel
) -> None:
    generator = torch.Generator().manual_seed(3)
    ids, other_ids = (torch.randint(5, 1000, (40,), generator=generator, dtype=torch.int32) for _ in range(2))
    with FeatureClient(spot_checked) as client, httpx.Client(base_url=spot_checked, timeout=60) as http:
        client.extract([{"token_ids": ids.tolist()}, {"token_ids": other_ids.tolist()}], featureset=[1, 3])
        own, other = (
            client.get(prompt_hash=parse_sample({"token_ids": i.tolist()}).prompt_hash).hidden_states
            for i in (ids, other_ids)
        )
        shifted = torch.cat([own[1:], own[-1:]])  # every row one token late, as an off-by-one dump has them
        for wrong in (shifted, other):  # an off-by-one dump; another request's features
            refused = post_import(http, tiny_loaded.revision, wrong.contiguous(), ids)
            assert refused.status_code == 422, refused.text
            assert "spot check" in refused.json()["error"]["message"]
        accepted = post_import(http, tiny_loaded.revision, own.contiguous(), ids)
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["manifest"]["backend"] == "unknown"
