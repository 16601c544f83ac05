"""hsstore: a hidden-state feature store. The client API is re-exported here, loaded on first use so that the CLI
(`hsstore.cli`, inside this package) starts without it; `import hsstore` then `hsstore.FeatureClient` works as ever."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "FeatureClient": "client",
    "FeatureSet": "client",
    "Features": "client",
    "prompt_hash": "client",
    "content_hash": "schemas",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hsstore' has no attribute {name!r}")
