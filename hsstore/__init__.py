"""hsstore: a hidden-state feature store. The client API is re-exported here; the CLI lives in `hsstore.cli`."""

from client import FeatureClient, Features, FeatureSet, prompt_hash
from schemas import content_hash

__all__ = ["FeatureClient", "FeatureSet", "Features", "content_hash", "prompt_hash"]
