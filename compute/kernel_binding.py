"""Which kernels transformers bound for the Gated-DeltaNet layers of a modeling module, read off the module itself:
the one definition of what backend a forward runs, shared by the service (which forces and records each call,
`service/model/kernels.py`) and a trainer that runs the target live and must not mix its bits with stored features
of another backend (`client/live/guard.py`).

transformers binds each kernel wrapper at import of the model's module: the wrapper keeps the torch reference as
`__wrapped__` and the bound implementation in its closure as `implementation`.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from schemas.backend import BACKENDS, CONV, FAST_ROOT, RULE, Backend

KERNELS: dict[str, str] = {
    "causal_conv1d_fn": CONV,
    "causal_conv1d_update": CONV,
    "torch_chunk_gated_delta_rule": RULE,
    "torch_recurrent_gated_delta_rule": RULE,
}


def origin(fn: Callable[..., Any]) -> str:
    """`module.qualname` of an implementation, e.g. `fla.ops.gated_delta_rule.chunk.chunk_gated_delta_rule`."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def bound(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """The implementation a kernel wrapper calls."""
    try:
        nonlocals = inspect.getclosurevars(wrapper).nonlocals
    except TypeError:
        return wrapper
    found: Callable[..., Any] = nonlocals.get("implementation", wrapper)
    return found


def is_fast(role: str, fn: Callable[..., Any]) -> bool:
    return getattr(fn, "__module__", "").split(".")[0] == FAST_ROOT[role]


def wrappers(module: ModuleType) -> dict[str, Callable[..., Any]]:
    return {name: getattr(module, name) for name in KERNELS if hasattr(module, name)}


def has_fast(module_wrappers: dict[str, Callable[..., Any]], role: str) -> bool:
    fns = [bound(w) for name, w in module_wrappers.items() if KERNELS[name] == role]
    return bool(fns) and all(is_fast(role, fn) for fn in fns)


def runnable(module_wrappers: dict[str, Callable[..., Any]], device_type: str) -> list[Backend]:
    """The backends these bindings can run on `device_type`, fastest first: the one rule of availability. A backend
    that needs fast kernels needs a CUDA device and every one of them bound; the last needs none."""
    return [
        spec.backend
        for spec in BACKENDS
        if not spec.fast or (device_type == "cuda" and all(has_fast(module_wrappers, role) for role in spec.fast))
    ]


def bound_backend(module: ModuleType, device_type: str) -> Backend:
    """The backend a forward of this module's models runs as bound (nothing forced), on `device_type`."""
    return runnable(wrappers(module), device_type)[0]


def live_backend(model: Any, device_type: str | None = None) -> str:
    """The backend a forward of `model` runs in this process as transformers bound its kernels (`fla`,
    `fla-noconv` or `torch`); `device_type` defaults to where the model's weights are."""
    module = sys.modules[type(model).__module__]
    if device_type is None:
        device_type = next(model.parameters()).device.type
    return bound_backend(module, device_type).value
