"""Versions and refusals, through the core services, where bit-different re-extractions can be staged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from schemas.api import ExtractRequest
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.keys import FeatureKey
from schemas.tensors import RawTensor
from service.errors import NonFiniteFeatures
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import load_model


def test_different_bits_add_a_version_and_both_stay_readable(settings: Settings, tiny_loaded: LoadedModel) -> None:
    services = build_services(settings, tiny_loaded)
    first = services.writer.extract(ExtractRequest(samples=[{"text": "versions"}])).results[0].manifest
    stored = services.store.get(first.content_hash)
    hidden = stored["hidden_states"]
    changed = bytearray(hidden.data)
    changed[0] ^= 1  # as a library upgrade would: the same key, other bits
    tensors = [RawTensor("hidden_states", "bfloat16", hidden.shape, memoryview(changed)), stored["input_ids"]]
    second_hash = content_hash(tensors)
    recorder, reader = services.recorder, services.reader
    second, added = recorder.record(first.model_copy(update={"content_hash": second_hash, "seq": None}), tensors)
    assert added and second.seq > first.seq
    key = FeatureKey(prompt_hash=first.prompt_hash)
    assert reader.resolve(key).content_hash == second_hash  # newest by default
    assert reader.read(reader.resolve(key.model_copy(update={"content_hash": first.content_hash}))).part.full
    pinned = reader.resolve(key.model_copy(update={"content_hash": second_hash}))
    assert reader.read(pinned).served_hash == second_hash
    _, added_again = recorder.record(second, tensors)
    assert not added_again  # same key, same bits: no version


def test_nan_features_are_refused_and_nothing_is_stored(tmp_path: Path, tiny_model_dir: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    name = next(n for n in weights if "layers.2.mlp.down_proj" in n)
    weights[name][0, 0] = float("inf")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    settings = Settings(data_dir=tmp_path / "store", model_dir=broken, device="cpu")
    services = build_services(settings, load_model(broken, "sha256:" + "1" * 64, "cpu"))
    with pytest.raises(NonFiniteFeatures, match=r"layers \[2, 3"):
        services.writer.extract(ExtractRequest(samples=[{"text": "explode"}], featureset=FeatureSet(layers=[1, 2, 3])))
    assert services.versions.count() == 0 and list(services.store.iter()) == []


def test_catalog_can_be_rebuilt_from_the_store(settings: Settings, tiny_loaded: LoadedModel) -> None:
    services = build_services(settings, tiny_loaded)
    results = services.writer.extract(ExtractRequest(samples=[{"text": f"rebuild {i}"} for i in range(3)])).results
    services.close()
    settings.catalog_path.unlink()
    rebuilt = build_services(settings.model_copy(update={"model_dir": None}))
    report = rebuilt.rebuilder.rebuild()
    assert (report.added, report.present, report.rejected) == (3, 0, [])
    for result in results:
        key = FeatureKey(prompt_hash=result.prompt_hash)
        assert rebuilt.reader.resolve(key).content_hash == result.manifest.content_hash


def test_replica_without_model_serves_but_does_not_extract(settings: Settings, tiny_loaded: LoadedModel) -> None:
    from fastapi.testclient import TestClient

    from service.main import create_app

    writer = build_services(settings, tiny_loaded)
    result = writer.writer.extract(ExtractRequest(samples=[{"text": "replica"}])).results[0]
    writer.close()
    replica = TestClient(create_app(replace_settings(settings, model_dir=None)))
    assert replica.get(f"/v1/features/{result.prompt_hash}").status_code == 200
    refused = replica.post("/v1/extract", json={"samples": [{"text": "x"}]})
    assert refused.status_code == 503 and "no model" in refused.json()["error"]["message"]
    assert replica.get("/v1/info").json()["model"] is None


def replace_settings(settings: Settings, **changes: object) -> Settings:
    return settings.model_copy(update=changes)


def test_identical_tokens_from_two_prompts_share_one_blob(settings: Settings, tiny_loaded: LoadedModel) -> None:
    services = build_services(settings, tiny_loaded)
    ids = tiny_loaded.tokenizer("shared bits")["input_ids"]
    a, b = services.writer.extract(ExtractRequest(samples=[{"text": "shared bits"}, {"token_ids": ids}])).results
    assert a.prompt_hash != b.prompt_hash and a.manifest.content_hash == b.manifest.content_hash
    assert len(list(services.store.iter())) == 1 and services.versions.count() == 2


def test_a_swapped_blob_is_caught_by_the_service_or_the_client(settings: Settings, tiny_loaded: LoadedModel) -> None:
    """Chunk checksums catch damaged bytes; bytes that are intact but wrong (two blobs swapped on disk) are caught
    by the content hash: on the service with verify_reads="full", on receipt by the client otherwise."""
    from client.errors import IntegrityError
    from client.features import decode_verified
    from schemas import safetensors_body
    from service.errors import CorruptEntry

    services = build_services(settings, tiny_loaded)
    samples = [{"text": "abc"}, {"text": "abd"}]
    a, b = (r.manifest for r in services.writer.extract(ExtractRequest(samples=samples)).results)
    assert a.num_tokens == b.num_tokens
    blobs = settings.data_dir / "blobs"
    path_a, path_b = (blobs / h[7:9] / h[7:] for h in (a.content_hash, b.content_hash))
    path_a.rename(blobs / "swap")
    path_b.rename(path_a)
    (blobs / "swap").rename(path_b)

    served = services.reader.read(a)  # crc32c of every chunk is fine: the bytes are intact, only misplaced
    with pytest.raises(IntegrityError):
        decode_verified(safetensors_body.encode(served.tensors.values(), served.metadata()))
    strict = build_services(settings.model_copy(update={"verify_reads": "full"}), tiny_loaded)
    with pytest.raises(CorruptEntry):
        strict.reader.read(a)
