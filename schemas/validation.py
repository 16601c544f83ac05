"""pydantic's validation errors in a user's words: `where: what`, without pydantic's links or input echoes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def describe_errors(errors: Iterable[Mapping[str, Any]], skip: tuple[str, ...] = ()) -> str:
    """One `location: message` per error (from `ValidationError.errors()` or FastAPI's), joined by '; '; location
    parts in `skip` (e.g. 'body') are left out."""
    reasons = []
    for err in errors:
        where = ".".join(str(part) for part in err.get("loc", ()) if part not in skip)
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        reasons.append(f"{where}: {message}" if where else message)
    return "; ".join(reasons) or "invalid"
