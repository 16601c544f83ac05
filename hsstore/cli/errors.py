"""The root group of the CLI: what it says when a command fails (one or two lines: what failed, what to do; no
traceback unless `--debug` or HSSTORE_DEBUG=1), and the root's options taken anywhere on the line."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

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
    if isinstance(exc, client_errors.ConnectionFailedError):
        return exc.message, f"is `hsstore serve` running there? {url_hint}"
    if isinstance(exc, client_errors.NotHsstoreError):
        return exc.message, url_hint
    if isinstance(exc, client_errors.AuthError):
        return exc.message, "pass a token with the needed scope: --token TOKEN or HSSTORE_TOKEN"
    if isinstance(exc, client_errors.WindowClosedError):
        return exc.message, None  # the service's message already says how to open one
    if isinstance(exc, client_errors.IntegrityError):
        return exc.message, "nothing was accepted; re-extract the entry, or report it if it repeats"
    if isinstance(exc, client_errors.HsstoreError):
        return exc.message, None
    if isinstance(exc, JsonlError | ConfigError):
        return str(exc), None
    if isinstance(exc, ValidationError):
        return f"invalid settings: {describe_errors(exc.errors(include_url=False, include_input=False))}", None
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), None
    return f"unexpected {type(exc).__name__}: {exc}", f"run with --debug (or {DEBUG_ENV}=1) for the traceback"


def debug_requested() -> bool:
    return os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes") or "--debug" in sys.argv


# The root's options, which a user may give anywhere on the line (`hsstore entries --url X`): name -> takes a value
ROOT_OPTIONS = {"--debug": False, "--url": True, "--token": True}


def hoist_root_options(args: list[str]) -> list[str]:
    """`args` with the root's options (and their values) moved in front of the command, up to a `--`."""
    hoisted: list[str] = []
    rest: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        if arg == "--":
            rest.extend(args[position:])
            break
        name = arg.split("=", 1)[0]
        if name in ROOT_OPTIONS:
            width = 2 if ROOT_OPTIONS[name] and "=" not in arg else 1
            hoisted.extend(args[position : position + width])
            position += width
            continue
        rest.append(arg)
        position += 1
    return hoisted + rest


class ErrorReportingGroup(TyperGroup):
    """Every command's failure reported by `explain` and exit status 1; click's own usage errors stay as they are."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]  # typer's own
        """The root's options (`--debug`, `--url`, `--token`) anywhere on the line, not only before the command."""
        return super().parse_args(ctx, hoist_root_options(args))

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]  # typer hands in its own Context
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # usage errors and exits: click's own handling
            raise
        except Exception as exc:
            if ctx.params.get("debug") or debug_requested():
                raise
            message, hint = explain(exc)
            typer.echo(f"error: {message}", err=True)
            if hint:
                typer.echo(f"  {hint}", err=True)
            raise typer.Exit(1) from None
