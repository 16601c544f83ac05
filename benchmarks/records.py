"""What every GPU benchmark record starts with: the command that made it, the device, and the software versions."""

from __future__ import annotations

import platform
import sys

import torch

from service.model.kernels import version_of


def record_header() -> dict:
    return {
        "command": " ".join(["python", *sys.argv]),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": version_of("transformers"),
            "flash-linear-attention": version_of("flash-linear-attention"),
            "causal-conv1d": version_of("causal-conv1d"),
            "zarr": version_of("zarr"),
        },
    }
