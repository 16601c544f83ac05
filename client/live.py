"""Which kernel backend a live model runs in this process, read off transformers' own bindings the way the service
labels what it stores (`schemas/kernel_binding.py`): what the guard and `compute_features` check stored entries
against."""

from __future__ import annotations

import sys
from typing import Any

from schemas.kernel_binding import bound_backend


def live_backend(model: Any, device_type: str | None = None) -> str:
    """The backend a forward of `model` runs in this process as transformers bound its kernels (`fla`,
    `fla-noconv` or `torch`); `device_type` defaults to where the model's weights are."""
    module = sys.modules[type(model).__module__]
    if device_type is None:
        device_type = next(model.parameters()).device.type
    return bound_backend(module, device_type).value
