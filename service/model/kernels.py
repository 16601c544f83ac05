"""Which kernels transformers bound for the Gated-DeltaNet layers, forcing the torch references, and recording
which implementation each call really used. The backend label comes from here, never from a flag.

What is bound is read as `compute/kernel_binding.py` defines it. The modeling code looks the wrappers up as module
globals at call time, so swapping a module attribute changes what the next forward runs.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from compute.kernel_binding import KERNELS, bound, has_fast, origin, runnable, wrappers
from schemas.backend import (
    AUTO,
    BACKEND_CHOICES,
    FAST_PACKAGE,
    FAST_ROOT,
    SPECS,
    Backend,
    backend_for_fast,
)
from service.errors import BackendMismatch, BackendUnavailable, InvalidRequest


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
        self.wrappers = wrappers(self.module)

    @classmethod
    def for_model(cls, model: Any) -> KernelSet:
        return cls(sys.modules[type(model).__module__])

    def has_fast(self, role: str) -> bool:
        return has_fast(self.wrappers, role)

    def available(self, device_type: str) -> list[str]:
        """Backends this host can run, measured from the bindings (fla needs a CUDA device)."""
        return [backend.value for backend in runnable(self.wrappers, device_type)]

    def resolve(self, requested: str, device_type: str) -> Backend:
        """`auto` is the fastest available; a named backend this host cannot run is refused, naming what is missing."""
        available = self.available(device_type)
        if requested == AUTO:
            return Backend(available[0])
        try:
            backend = Backend(requested)
        except ValueError:
            raise InvalidRequest(f"unknown backend {requested!r}; one of {', '.join(BACKEND_CHOICES)}") from None
        if backend.value in available:
            return backend
        fast = SPECS[backend].fast
        missing = [package for role, package in FAST_PACKAGE.items() if role in fast and not self.has_fast(role)]
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
            chosen = bound(wrapper) if _needs(backend, KERNELS[name]) else getattr(wrapper, "__wrapped__", wrapper)
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
                        chosen, used = wrapper, origin(bound(wrapper))
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
    return role in SPECS[backend].fast


def measured_backend(calls: dict[str, str]) -> Backend | None:
    """The backend the recorded calls add up to; None when no linear-attention kernel ran."""
    roles = {KERNELS[name]: used.split(".")[0] for name, used in calls.items()}
    if not roles:
        return None
    measured = backend_for_fast({role for role, root in roles.items() if root == FAST_ROOT[role]})
    if measured is None:
        raise BackendMismatch(f"the kernels that ran are no known backend's mix: {calls}")
    return measured
