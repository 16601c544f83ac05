"""Layer unions: an entry extracted once for the union of several recipes' layers serves each recipe's reads,
sliced, bit-equal to extracting that recipe alone; every read path resolves a featureset named by its parts alike."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch
from torch.utils.data import DataLoader

from client import FeatureClient, FeatureDataset, NotFoundError, pad_collate
from client.exchange import export, newest_versions
from schemas.featureset import FeatureSet
from schemas.states import ExtractStatus
from tests.client.training.test_cache_through import _writes

UNION = FeatureSet(layers=["embed", 1, 2, 5, 6])
RECIPES = [FeatureSet(layers=[1, 5, 6]), FeatureSet(layers=[2, 5, 6]), FeatureSet(layers=["embed", 2])]


def _samples(count: int) -> list[dict]:
    return [
        {"id": f"u{i}", "text": f"class Node{i}:\n    def visit(self): return {i}\n" * (i + 2)} for i in range(count)
    ]


def test_a_union_serves_each_recipe_bit_equal_to_extracting_it_alone(client: FeatureClient) -> None:
    samples = _samples(2)
    union = {r.prompt_hash: r for r in client.extract(samples, featureset=UNION).results}
    for recipe in RECIPES:
        served = [client.get(s, featureset=recipe) for s in samples]
        batch = client.get_batch([{"prompt": s, "featureset": recipe} for s in samples])
        assert all(client.exists(s, featureset=recipe) for s in samples)
        # extracting the recipe, counting what holds it as stored, finds the union: nothing is extracted again
        found = client.extract(samples, featureset=recipe, existing="holding").results
        assert [r.status for r in found] == [ExtractStatus.EXISTING] * 2
        assert [r.manifest.content_hash for r in found] == [union[r.prompt_hash].manifest.content_hash for r in found]
        alone = client.extract(samples, featureset=recipe).results  # by default: the recipe's own entry
        assert [r.status for r in alone] == [ExtractStatus.EXTRACTED] * 2
        for sample, via_union, in_batch, own in zip(samples, served, batch, alone, strict=True):
            assert via_union.manifest.featureset_id == UNION.id and via_union.layers == recipe.layers
            exact = client.get(sample, featureset=recipe.id)
            assert exact.content_hash == own.manifest.content_hash and exact.layers == recipe.layers
            for features in (via_union, in_batch):
                assert torch.equal(features.hidden_states, exact.hidden_states)  # bit for bit
                assert torch.equal(features.input_ids, exact.input_ids)
            # with the recipe's own entry stored, a read of the recipe is served by it
            assert client.get(sample, featureset=recipe).manifest.featureset_id == recipe.id
    # a narrower read of a recipe is served too, and a read the union does not hold is not found
    assert client.get(samples[0], featureset=RECIPES[0], layers=[5]).layers == [5]
    for missing in (
        FeatureSet(layers=[3]),
        FeatureSet(layers=[1], dtype="float8_e4m3fn"),
        FeatureSet(layers=[1], top_k=4),
    ):
        with pytest.raises(NotFoundError, match="stored"):
            client.get(samples[0], featureset=missing)
        assert not client.exists(samples[0], featureset=missing)


def test_the_nearest_holding_featureset_serves(client: FeatureClient) -> None:
    sample = _samples(1)[0]
    client.extract([sample], featureset=UNION)
    fewer = FeatureSet(layers=[1, 5, 6, 7])
    beyond = FeatureSet(layers=[1, 3, 5, 6], target_ids=True)
    client.extract([sample], featureset=beyond)
    assert client.get(sample, featureset=RECIPES[0]).manifest.featureset_id == beyond.id  # fewer layers
    client.extract([sample], featureset=fewer)
    assert client.get(sample, featureset=RECIPES[0]).manifest.featureset_id == fewer.id  # as few, nothing beyond
    assert client.get(sample, featureset=FeatureSet(layers=[1], target_ids=True)).target_ids is not None


def test_a_cache_through_epoch_over_a_union_extracts_only_what_no_entry_holds(
    client: FeatureClient, live_url: str, http: httpx.Client
) -> None:
    samples = _samples(5)
    client.extract(samples[:3], featureset=UNION)  # the operator warmed the union for three
    recipe = RECIPES[1]
    dataset = FeatureDataset(live_url, samples=samples, featureset=recipe, on_missing="extract")
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=pad_collate)
    first = [h for batch in loader for h in batch["content_hash"]]
    job = client.jobs()[0]
    assert (job.total, job.existing, job.done - job.existing, job.failed) == (5, 3, 2, 0)
    featuresets = sorted(m.featureset_id for m in client.entries())
    assert featuresets == sorted([UNION.id] * 3 + [recipe.id] * 2)
    before = _writes(http)
    assert [h for batch in loader for h in batch["content_hash"]] == first and _writes(http) == before
    assert dataset[0]["hidden_states"].shape[1] == len(recipe.layers)


def test_an_export_of_a_recipe_takes_each_prompt_from_the_entry_holding_it(
    client: FeatureClient, tmp_path: Path
) -> None:
    samples = _samples(3)
    client.extract(samples[:2], featureset=UNION)
    client.extract(samples[1:], featureset=RECIPES[0])  # sample 1 is in both
    holding = FeatureSet(layers=RECIPES[0].layers)
    manifests = newest_versions(client.entries(), holding=holding)
    assert sorted(m.featureset_id for m in manifests) == sorted([UNION.id, RECIPES[0].id, RECIPES[0].id])
    index = export(client, manifests, "specforge", tmp_path / "out", layers=list(holding.layers)).index()
    assert len(index.entries) == 3 and index.layers == holding.layers and index.featureset == holding
    for entry in index.entries:  # each file holds the recipe's layers, as a read of the recipe gives them
        record = torch.load(tmp_path / "out" / entry.file, weights_only=False, mmap=True)
        read = client.get(prompt_hash=entry.prompt_hash, featureset=holding)
        assert entry.content_hash == read.content_hash
        assert torch.equal(record["hidden_states"][0], read.hidden_states.flatten(1))


def test_parts_of_a_featureset_narrow_a_read_as_any_other_key_part(client: FeatureClient, http: httpx.Client) -> None:
    """Named without layers (or beside an id) the parts filter what is stored: never a refusal, a 404 when nothing
    stored has them."""
    sample = _samples(1)[0]
    prompt_hash = client.extract([sample], featureset=UNION).results[0].prompt_hash
    found = {
        "dtype=bfloat16": 200,
        "top_k=4": 404,
        "target_ids=true&layers=1": 404,
        f"dtype=bfloat16&layers=1&featureset={UNION.id}": 200,
        f"dtype=float8_e4m3fn&featureset={UNION.id}": 404,
        "dtype=float16&layers=1": 422,
    }
    for query, status in found.items():
        response = http.get(f"/v1/features/{prompt_hash}?{query}")
        assert response.status_code == status, (query, response.text)
    served = http.get(f"/v1/features/{prompt_hash}?dtype=bfloat16")
    assert served.headers["x-hsstore-featureset"] == UNION.id
    response = http.post("/v1/features:batch", json={"keys": [{"prompt_hash": prompt_hash, "top_k": 4}]})
    assert response.status_code == 404 and "top_k=4" in response.text
