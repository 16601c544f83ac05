"""What the CLI says when a command fails: one or two lines, what failed and what to do; no traceback unless
`--debug` or HSSTORE_DEBUG=1 (the root group, group.py, reports through `explain`)."""

from __future__ import annotations

import os
import sys

from pydantic import ValidationError

from schemas.jsonl import JsonlError
from schemas.validation import describe_errors

DEBUG_ENV = "HSSTORE_DEBUG"


class CliError(Exception):
    """A failure the CLI found itself, with what to do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message, self.hint = message, hint
        super().__init__(message)


def explain(exc: Exception) -> tuple[str, str | None]:
    """(what failed, what to do) for an exception a command let through."""
    from client import errors as client_errors  # the client is light, but only commands that talk need it
    from service.errors import ConfigError

    url_hint = "point the CLI at the service with --url URL or HSSTORE_URL"
    if isinstance(exc, CliError):
        return exc.message, exc.hint
    # the client's errors: its message, and what to do about it on this command line (first match wins)
    hints: list[tuple[type[client_errors.HsstoreError], str | None]] = [
        (client_errors.ConnectionFailedError, f"is `hsstore serve` running there? {url_hint}"),
        (client_errors.NotHsstoreError, url_hint),
        (client_errors.AuthError, "pass a token with the needed scope: --token TOKEN or HSSTORE_TOKEN"),
        (client_errors.WindowClosedError, None),  # the service's message already says how to open one
        (client_errors.IntegrityError, "nothing was accepted; re-extract the entry, or report it if it repeats"),
        (client_errors.AmbiguousError, "name one: --model-revision REVISION, --backend BACKEND, --featureset ID"),
        (client_errors.HsstoreError, None),
    ]
    for kind, hint in hints:
        if isinstance(exc, kind):
            return exc.message, hint
    if isinstance(exc, JsonlError | ConfigError):
        return str(exc), None
    if isinstance(exc, ValidationError):
        return f"invalid settings: {describe_errors(exc.errors(include_url=False, include_input=False))}", None
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), None
    return f"unexpected {type(exc).__name__}: {exc}", f"run with --debug (or {DEBUG_ENV}=1) for the traceback"


def debug_requested() -> bool:
    return os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes") or "--debug" in sys.argv
