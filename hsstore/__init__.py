"""hsstore: a hidden-state feature store. The client API is re-exported here, loaded on first use so that the CLI
(`hsstore.cli`, inside this package) starts without it; `import hsstore` then `hsstore.FeatureClient` works as ever."""

from __future__ import annotations

from schemas.lazy import lazy_exports

_EXPORTS = {
    "FeatureClient": "client",
    "FeatureSet": "client",
    "Features": "client",
    "prompt_hash": "client",
    "content_hash": "schemas",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
