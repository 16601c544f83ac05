"""A package's names loaded from their modules on first use (PEP 562): what keeps `import hsstore`, `import schemas`
and `import client` from importing numpy, torch or the HTTP stack before a caller needs them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """The module `__getattr__` of `package` that gives each name of `exports` (name -> the module defining it)."""

    def __getattr__(name: str) -> object:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
