"""Which kernels transformers bound for the Gated-DeltaNet layers, forcing the torch references, and recording
which implementation each call really used. The backend label comes from here, never from a flag.

transformers binds each kernel wrapper at import of the model's module (GPU.md): the wrapper keeps the torch reference
as `__wrapped__` and the bound implementation in its closure as `implementation`. The modeling code looks the wrappers
up as module globals at call time, so swapping a module attribute changes what the next forward runs.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from schemas.backend import AUTO, Backend
from service.errors import BackendMismatch, BackendUnavailable, InvalidRequest

CONV = "conv"
RULE = "rule"
KERNELS: dict[str, str] = {
    "causal_conv1d_fn": CONV,
    "causal_conv1d_update": CONV,
    "torch_chunk_gated_delta_rule": RULE,
    "torch_recurrent_gated_delta_rule": RULE,
}
PACKAGE = {CONV: "causal-conv1d", RULE: "flash-linear-attention"}
_FAST_ROOT = {CONV: "causal_conv1d", RULE: "fla"}


def origin(fn: Callable[..., Any]) -> str:
    """`module.qualname` of an implementation, e.g. `fla.ops.gated_delta_rule.chunk.chunk_gated_delta_rule`."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def _bound(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    try:
        nonlocals = inspect.getclosurevars(wrapper).nonlocals
    except TypeError:
        return wrapper
    return nonlocals.get("implementation", wrapper)


def _is_fast(role: str, fn: Callable[..., Any]) -> bool:
    return getattr(fn, "__module__", "").split(".")[0] == _FAST_ROOT[role]


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class KernelSet:
    """The kernel wrappers of one modeling module (e.g. transformers' qwen3_5)."""

    module: ModuleType
    wrappers: dict[str, Callable[..., Any]] = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.wrappers = {name: getattr(self.module, name) for name in KERNELS if hasattr(self.module, name)}

    @classmethod
    def for_model(cls, model: Any) -> KernelSet:
        return cls(sys.modules[type(model).__module__])

    def has_fast(self, role: str) -> bool:
        fns = [_bound(w) for name, w in self.wrappers.items() if KERNELS[name] == role]
        return bool(fns) and all(_is_fast(role, fn) for fn in fns)

    def available(self, device_type: str) -> list[str]:
        """Backends this host can run, measured from the bindings (fla needs a CUDA device)."""
        found = [Backend.TORCH.value]
        if device_type == "cuda" and self.has_fast(RULE):
            found.insert(0, Backend.FLA_NOCONV.value)
            if self.has_fast(CONV):
                found.insert(0, Backend.FLA.value)
        return found

    def resolve(self, requested: str, device_type: str) -> Backend:
        """`auto` is the fastest available; a named backend this host cannot run is refused, naming what is missing."""
        available = self.available(device_type)
        if requested == AUTO:
            return Backend(available[0])
        try:
            backend = Backend(requested)
        except ValueError:
            raise InvalidRequest(f"unknown backend {requested!r}; one of auto, fla, fla-noconv, torch") from None
        if backend.value in available:
            return backend
        missing = [PACKAGE[role] for role in (RULE, CONV) if _needs(backend, role) and not self.has_fast(role)]
        if device_type != "cuda":
            reason = f"the model runs on {device_type}, and fla's kernels need a CUDA device"
        else:
            reason = "not installed: " + ", ".join(missing)
        raise BackendUnavailable(
            f"backend {backend.value!r} cannot run on this host ({reason}); available: {available}"
        )

    def plan(self, backend: Backend) -> dict[str, str]:
        """The implementation each kernel runs under `backend`."""
        plan = {}
        for name, wrapper in self.wrappers.items():
            chosen = _bound(wrapper) if _needs(backend, KERNELS[name]) else getattr(wrapper, "__wrapped__", wrapper)
            plan[name] = origin(chosen)
        return plan

    @contextlib.contextmanager
    def running(self, backend: Backend) -> Iterator[KernelRun]:
        """Bind `backend`'s kernels while the block runs; the KernelRun records what each call really used."""
        run = KernelRun(backend)

        def recorder(name: str, fn: Callable[..., Any], used: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                run.calls[name] = used
                return fn(*args, **kwargs)

            return call

        with self._lock:
            try:
                for name, wrapper in self.wrappers.items():
                    role = KERNELS[name]
                    if _needs(backend, role):
                        chosen, used = wrapper, origin(_bound(wrapper))
                    else:
                        reference = getattr(wrapper, "__wrapped__", wrapper)
                        chosen, used = reference, origin(reference)
                    setattr(self.module, name, recorder(name, chosen, used))
                yield run
            finally:
                for name, wrapper in self.wrappers.items():
                    setattr(self.module, name, wrapper)
        run.verify()


@dataclass
class KernelRun:
    backend: Backend
    calls: dict[str, str] = field(default_factory=dict)

    def verify(self) -> None:
        """Raise BackendMismatch if the calls so far add up to another backend than the one asked for."""
        measured = measured_backend(self.calls)
        if measured is not None and measured != self.backend:
            raise BackendMismatch(f"asked for {self.backend.value} but the kernels that ran were {self.calls}")


def _needs(backend: Backend, role: str) -> bool:
    """Does `backend` use the fast kernel for `role`?"""
    if role == RULE:
        return backend in (Backend.FLA, Backend.FLA_NOCONV)
    return backend == Backend.FLA


def measured_backend(calls: dict[str, str]) -> Backend | None:
    """The backend the recorded calls add up to; None when no linear-attention kernel ran."""
    roles = {KERNELS[name]: used.split(".")[0] for name, used in calls.items()}
    if not roles:
        return None
    rule_fast = roles.get(RULE) == _FAST_ROOT[RULE]
    conv_fast = roles.get(CONV) == _FAST_ROOT[CONV]
    if rule_fast and conv_fast:
        return Backend.FLA
    if rule_fast:
        return Backend.FLA_NOCONV
    if not conv_fast:
        return Backend.TORCH
    raise BackendMismatch(f"causal-conv1d ran with the torch delta rule, which is no known backend: {calls}")
