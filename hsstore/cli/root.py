"""The `hsstore` command line: the root group, its options, and `VERBS`, the one table of every verb by the name a
user types (`hsstore --help` lists it); each verb lives in the module beside this one for its group (run, write, read,
ops, datasets, exchange, admin).

Commands that only talk to a service import neither torch nor the service: they start in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from hsstore.cli import admin, datasets, exchange, ops, read, run, write
from hsstore.cli.group import LOCAL_HELP, ErrorReportingGroup
from hsstore.cli.options import DEFAULT_URL, Connection, TokenOption, UrlOption

app = typer.Typer(
    help="hsstore: a hidden-state feature store",
    cls=ErrorReportingGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's own help: typer's panels show every flag as `<bool>`, as if it took a value
)
# Every verb, by the name a user types: one table, one registration style
VERBS: dict[str, Callable[..., None]] = {
    "serve": run.serve,
    "worker": run.worker,
    "devmodel": run.devmodel,
    "extract": write.extract,
    "warm": write.warm,
    "estimate": write.estimate,
    "workers": ops.workers,
    "health": ops.health,
    "get": read.get,
    "entries": read.entries,
    "compare": read.compare,
    "audit": read.audit,
    "export": exchange.export,
    "import": exchange.import_,
    "rebuild-catalog": admin.rebuild_catalog,
    "migrate": admin.migrate,
    "verify": admin.verify,
}
# The groups of verbs (`hsstore jobs show ID`), each with its verbs
GROUPS: dict[str, tuple[typer.Typer, dict[str, Callable[..., None]]]] = {
    "jobs": (ops.jobs_app, {"show": ops.jobs_show, "cancel": ops.jobs_cancel}),
    "window": (ops.window_app, {"status": ops.window_status, "open": ops.window_open, "close": ops.window_close}),
    "dataset": (datasets.dataset_app, {"create": datasets.dataset_create, "show": datasets.dataset_show}),
}
# Verbs run where the store or the model is, talking to no service: --url and --token mean nothing to them
LOCAL_VERBS = {"serve", "worker", "devmodel", "rebuild-catalog", "migrate", "verify"}
for name, verb in VERBS.items():
    app.command(name, epilog=LOCAL_HELP if name in LOCAL_VERBS else None)(verb)
for name, (group, verbs) in GROUPS.items():
    for verb_name, verb in verbs.items():
        group.command(verb_name)(verb)
    app.add_typer(group, name=name)


def _print_version(wanted: bool) -> None:
    if wanted:
        from service import __version__  # the package's own module, which imports nothing

        typer.echo(f"hsstore {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    debug: Annotated[
        bool, typer.Option("--debug", help="show the traceback when a command fails (or HSSTORE_DEBUG=1)")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print hsstore's version and exit"),
    ] = False,
) -> None:
    """hsstore: a hidden-state feature store. --url, --token and --debug go anywhere on the line."""
    ctx.obj = Connection(url, token)
