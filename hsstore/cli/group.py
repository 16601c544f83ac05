"""The CLI's root group: the root's options taken anywhere on the line, every command's failure reported by
`explain` with exit status 1, and help that names what each option takes (METAVARS) and the root's options."""

from __future__ import annotations

import os
import signal
import sys
from functools import partial
from typing import Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from hsstore.cli.errors import debug_requested, explain

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


# What an option's value is, in help and usage, by the option's name; else by its type (typer's own `<str>`
# says only the Python type)
METAVARS = {
    "featureset": "ID",
    "prompt_hash": "HASH",
    "content_hash": "HASH",
    "backend": "BACKEND",
    "model_revision": "REVISION",
    "since": "WHEN",
    "cursor": "CURSOR",
    "url": "URL",
    "token": "TOKEN",
    "layers": "LAYERS",
    "dtype": "DTYPE",
    "device": "DEVICE",
}
BY_TYPE = {"str": "TEXT", "int": "N", "float": "X", "Path": "PATH", "datetime": "TIME"}
ROOT_HELP = "Root options, anywhere on the line: --url URL, --token TOKEN, --debug (see `hsstore --help`)."
LOCAL_HELP = "--debug, anywhere on the line, shows the traceback of a failure (see `hsstore --help`)."


def _metavar(param: TyperArgument | TyperOption) -> str | None:
    if isinstance(param, TyperArgument):
        return (param.name or "value").upper()
    if param.is_flag or param.type_descriptor.is_choice:
        return None  # a flag takes no value; a choice lists its values
    return METAVARS.get(param.name or "") or BY_TYPE.get(param.bare_type())


def _usage(argument: TyperArgument, _ctx: Any) -> list[str]:
    name = argument.metavar or (argument.name or "value").upper()
    return [(name if argument.required else f"[{name}]") + ("..." if argument.nargs != 1 else "")]


def describe_values(command: Any, root: bool = True) -> None:
    """Every parameter of `command` and its subcommands gets the metavar the table gives it; every subcommand's help
    ends by naming the root's options."""
    for param in command.params:
        if isinstance(param, TyperArgument | TyperOption) and param.metavar is None:
            param.metavar = _metavar(param)
        if isinstance(param, TyperArgument):  # usage as click writes it (`JSONL`, `[PATH]`), not typer's `{JSONL}`
            param.get_usage_pieces = partial(_usage, param)  # type: ignore[method-assign]  # click's hook, per param
    if not root and command.epilog is None:
        command.epilog = ROOT_HELP
    for sub in getattr(command, "commands", {}).values():
        describe_values(sub, root=False)


class ErrorReportingGroup(TyperGroup):
    """Every command's failure reported by `explain` and exit status 1; click's own usage errors stay as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        describe_values(self)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]  # typer's own
        """The root's options (`--debug`, `--url`, `--token`) anywhere on the line, not only before the command."""
        return super().parse_args(ctx, hoist_root_options(args))

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]  # typer hands in its own Context
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # usage errors and exits: click's own handling
            raise
        except BrokenPipeError:
            # whoever read the output stopped reading (`hsstore entries | head`): nothing failed and nothing more can
            # be said; stdout goes nowhere, so the interpreter's last flush cannot fail again, and the status is a
            # shell's for a writer whose reader left
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(128 + signal.SIGPIPE) from None
        except Exception as exc:
            if ctx.params.get("debug") or debug_requested():
                raise
            message, hint = explain(exc)
            typer.echo(f"error: {message}", err=True)
            if hint:
                typer.echo(f"  {hint}", err=True)
            raise typer.Exit(1) from None
