"""The `hsstore` command line (`root.py` builds it; a module per group of verbs beside it)."""

from hsstore.cli.root import app

__all__ = ["app"]
