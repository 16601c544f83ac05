"""The one mark every GPU test module carries: `gpu`, and a skip naming what this host lacks."""

from __future__ import annotations

import importlib.util

import pytest
import torch


def needs_gpu_with(*packages: str) -> list[pytest.MarkDecorator]:
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    reason = "needs a CUDA GPU" + (f" with {', '.join(packages)}" if packages else "")
    return [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or bool(missing), reason=reason)]
