"""The trainer-side backend guard: the live model's backend read from its own kernel bindings, and a mix with stored
features of another backend refused (the seeds' failure: torch-fallback features evaluated against fla)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from client import FeatureClient, MixedBackendsError, check_backends, compute_features, live_backend
from compute.kernel_binding import bound_backend
from compute.tensors import from_torch, to_torch
from schemas.batching import PackPolicy
from schemas.featureset import FeatureSet
from service.model.loader import LoadedModel
from tests.service.model.test_kernels import fake_module


def test_the_live_backend_is_read_from_the_bindings(tiny_loaded: LoadedModel) -> None:
    assert live_backend(tiny_loaded.model) == "torch"  # on the CPU only the torch references run
    # the same reading on a GPU host, for each way transformers can have bound the kernels
    assert bound_backend(fake_module(conv_fast=True, rule_fast=True), "cuda") == "fla"
    assert bound_backend(fake_module(conv_fast=False, rule_fast=True), "cuda") == "fla-noconv"  # the seeds' trainer
    assert bound_backend(fake_module(conv_fast=False, rule_fast=False), "cuda") == "torch"
    assert bound_backend(fake_module(conv_fast=True, rule_fast=True), "cpu") == "torch"


def test_stored_features_of_another_backend_are_refused(client: FeatureClient, tiny_loaded: LoadedModel) -> None:
    sample = {"text": "def guarded(): return 1"}
    manifest = client.extract([sample], backend="torch").results[0].manifest
    features = client.get(sample)
    assert check_backends([features, manifest], tiny_loaded.model) == "torch"
    as_fla = manifest.model_copy(update={"backend": "fla"})
    with pytest.raises(MixedBackendsError, match=r"torch kernels.*extracted with fla"):
        check_backends([manifest, as_fla], tiny_loaded.model)
    with pytest.raises(MixedBackendsError):
        check_backends([features], backend="fla-noconv")
    with pytest.raises(ValueError):
        check_backends([features])


def test_compute_features_is_the_stored_entry_bit_for_bit(client: FeatureClient, tiny_loaded: LoadedModel) -> None:
    """The trainer's own call, with the model and no service: the tensors the entry holds, as stored."""
    sample = {"text": "def live(): return 2", "completion": {"text": " # and more"}}
    featureset = FeatureSet(layers=["embed", 1, 3, "final_norm"], target_ids=True, top_k=4)
    client.extract([sample], featureset=featureset, backend="torch")
    stored = client.get(sample, featureset=featureset)
    live = compute_features(tiny_loaded.model, stored.input_ids, featureset, backend="torch")
    assert set(live) == set(stored.tensors) - {"loss_mask"}  # the mask is the sample's, not a computation's
    for name, tensor in live.items():
        assert torch.equal(tensor, to_torch(stored.tensors[name])), name
    with pytest.raises(MixedBackendsError, match="entries of backend fla"):
        compute_features(tiny_loaded.model, stored.input_ids, featureset, backend="fla")


def test_entries_of_another_computation_are_refused_by_their_fingerprint(
    client: FeatureClient, tiny_loaded: LoadedModel
) -> None:
    """Today's case from the exactness issue: fla entries of an earlier release's packs beside a live fla forward."""
    sample = {"text": "def packed(): return 3"}
    manifest = client.extract([sample], backend="torch").results[0].manifest
    packed = PackPolicy(16384, own_rows=False).describe()
    legacy = manifest.model_copy(update={"fingerprint": manifest.fingerprint.model_copy(update={"batching": packed})})
    with pytest.raises(MixedBackendsError, match="not the model's own forward"):
        check_backends([manifest, legacy], tiny_loaded.model)
    assert check_backends([manifest], tiny_loaded.model) == "torch"


def test_entries_whose_bits_this_process_does_not_compute_are_refused(
    client: FeatureClient, tiny_loaded: LoadedModel
) -> None:
    """Whatever the fingerprint says, the bits decide: an entry of other bits (here one value changed, as another
    GPU type or library version would change many) is refused, naming the share of equal values."""
    sample = {"text": "def measured(): return 4"}
    client.extract([sample], backend="torch")
    stored = client.get(sample)
    assert check_backends([stored], tiny_loaded.model) == "torch"  # its own bits: reproduced here
    hidden = to_torch(stored.tensors["hidden_states"]).clone()
    hidden[0, 0, 0] += 1
    other = dataclasses.replace(
        stored, tensors={**stored.tensors, "hidden_states": from_torch("hidden_states", hidden)}
    )
    with pytest.raises(MixedBackendsError, match=r"computes other bits .*% of its hidden-state values are equal"):
        check_backends([other], tiny_loaded.model)
