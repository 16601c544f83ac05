"""Backend measurement. On this CPU host only `torch` runs; the fla paths are exercised on the GPU (tests marked gpu)
and here against a module whose wrappers are bound the way transformers binds them when fla is importable."""

from __future__ import annotations

import functools
import types

import pytest

from schemas.backend import Backend
from service.errors import BackendMismatch, BackendUnavailable, InvalidRequest
from service.model.kernels import KernelSet, measured_backend
from service.model.loader import LoadedModel


def bound_like_transformers(torch_function, implementation):
    """Mirror of transformers' use_kernel_func_from_hub_with_fallback wrapper: the bound function in the closure."""

    @functools.wraps(torch_function)
    def wrapped(*args, **kwargs):
        return implementation(*args, **kwargs)

    return wrapped


def fake_module(conv_fast: bool, rule_fast: bool) -> types.ModuleType:
    module = types.ModuleType("fake_modeling")

    def make(name: str, fast_root: str | None) -> None:
        def reference(*args, **kwargs):
            return ("torch", name)

        reference.__module__ = "transformers.models.qwen3_5.modeling_qwen3_5"
        reference.__qualname__ = name
        impl = reference
        if fast_root:

            def impl(*args, **kwargs):
                return (fast_root, name)

            impl.__module__ = f"{fast_root}.ops"
            impl.__qualname__ = name
        setattr(module, name, bound_like_transformers(reference, impl))

    make("causal_conv1d_fn", "causal_conv1d" if conv_fast else None)
    make("causal_conv1d_update", "causal_conv1d" if conv_fast else None)
    make("torch_chunk_gated_delta_rule", "fla" if rule_fast else None)
    make("torch_recurrent_gated_delta_rule", "fla" if rule_fast else None)
    return module


def test_cpu_host_runs_torch_only(tiny_loaded: LoadedModel) -> None:
    kernels = tiny_loaded.kernels
    assert kernels.available("cpu") == ["torch"]
    assert kernels.resolve("auto", "cpu") == Backend.TORCH
    with pytest.raises(BackendUnavailable, match="fla"):
        kernels.resolve("fla", "cpu")
    with pytest.raises(InvalidRequest):
        kernels.resolve("cuda-magic", "cpu")


@pytest.mark.parametrize(
    ("conv", "rule", "available"),
    [
        (True, True, ["fla", "fla-noconv", "torch"]),
        (False, True, ["fla-noconv", "torch"]),
        (False, False, ["torch"]),
    ],
)
def test_available_backends_follow_bindings(conv: bool, rule: bool, available: list[str]) -> None:
    assert KernelSet(fake_module(conv, rule)).available("cuda") == available


def test_fla_without_causal_conv1d_is_refused_naming_the_package() -> None:
    kernels = KernelSet(fake_module(conv_fast=False, rule_fast=True))
    with pytest.raises(BackendUnavailable, match="causal-conv1d"):
        kernels.resolve("fla", "cuda")
    assert kernels.resolve("auto", "cuda") == Backend.FLA_NOCONV


@pytest.mark.parametrize("backend", list(Backend))
def test_forced_backends_run_and_record_what_ran(backend: Backend) -> None:
    module = fake_module(conv_fast=True, rule_fast=True)
    kernels = KernelSet(module)
    with kernels.running(backend) as run:
        conv = module.causal_conv1d_fn()
        rule = module.torch_chunk_gated_delta_rule()
    assert measured_backend(run.calls) == backend
    assert conv[0] == ("causal_conv1d" if backend == Backend.FLA else "torch")
    assert rule[0] == ("torch" if backend == Backend.TORCH else "fla")
    assert module.causal_conv1d_fn is kernels.wrappers["causal_conv1d_fn"]  # restored afterwards


def test_conv_kernel_with_torch_rule_is_no_backend() -> None:
    with pytest.raises(BackendMismatch):
        measured_backend({"causal_conv1d_fn": "causal_conv1d.fn", "torch_chunk_gated_delta_rule": "transformers.x"})


def test_manifest_records_the_kernels_that_ran(tiny_loaded: LoadedModel, client) -> None:
    result = client.extract([{"text": "kernels"}]).results[0]
    fingerprint = result.manifest.fingerprint
    assert result.manifest.backend == "torch"
    assert all(origin.startswith("transformers.") for origin in fingerprint.kernels.values())
    assert fingerprint.device == "cpu" and fingerprint.dtype == "bfloat16"
