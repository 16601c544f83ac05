"""The trainer-side backend guard: the live model's backend read from its own kernel bindings, and a mix with stored
features of another backend refused (the seeds' failure: torch-fallback features evaluated against fla)."""

from __future__ import annotations

import pytest

from client import FeatureClient, MixedBackendsError, check_backends, live_backend
from schemas.kernel_binding import bound_backend
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
