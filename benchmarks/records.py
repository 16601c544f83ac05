"""What every GPU benchmark record starts with: the command that made it, the device, and the software versions."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch

from service.model.kernels import version_of


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def record_header() -> dict:
    return {
        "command": " ".join(["python", *sys.argv]),
        "commit": os.environ.get("HSSTORE_COMMIT"),  # the device's copy has no .git: the launching side names it
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": version_of("transformers"),
            "flash-linear-attention": version_of("flash-linear-attention"),
            "causal-conv1d": version_of("causal-conv1d"),
            "zarr": version_of("zarr"),
            "numcodecs": version_of("numcodecs"),
            "blosc2": version_of("blosc2"),
        },
        "cpu": cpu_model(),
    }
