"""What every `hsstore` command that talks to a service takes and shows: the root's URL and token options (the
root group takes them anywhere on the line), the console for progress, the client, and the sample-file argument."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from schemas.featureset import FEATURE_DTYPES
from schemas.http import DEFAULT_URL

if TYPE_CHECKING:
    from client import FeatureClient

console = Console(stderr=True)  # progress and spinners; results go to stdout

UrlOption = Annotated[str, typer.Option(envvar="HSSTORE_URL", help="service base URL (or HSSTORE_URL)")]
TokenOption = Annotated[str | None, typer.Option(envvar="HSSTORE_TOKEN", help="bearer token (or HSSTORE_TOKEN)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON (whole ids) instead of columns")]
# Files are checked by the command itself, so a missing one is a one-line error like every other
SamplesArgument = Annotated[Path, typer.Argument(help="JSONL file, one sample per line")]
LayersOption = Annotated[str | None, typer.Option(help="layer ids, any order: 1,16,embed (default: DFlash's)")]
DtypeOption = Annotated[str, typer.Option(help="; ".join(f"{name}: {what}" for name, what in FEATURE_DTYPES.items()))]
TargetIdsOption = Annotated[bool, typer.Option("--target-ids", help="also store the target's argmax next tokens")]
TopKOption = Annotated[
    int | None, typer.Option(help="also store the target's top-k next-token log-probabilities and their mass")
]
# --featureset ID, one name wherever a verb takes a featureset's id: a filter where entries are found or read, a
# choice instead of --layers where features are extracted
FeaturesetOption = Annotated[str | None, typer.Option(help="featureset id")]
FeaturesetForLayersOption = Annotated[
    str | None, typer.Option(help="instead of --layers: a featureset's id (one the store holds, or the default)")
]


def service_url(given: str) -> str:
    """The service's base URL from what a user types: `host:port` and `host` get `http://`; the API's own paths
    (`.../v1`) are refused in one line saying what a base URL looks like."""
    from urllib.parse import urlsplit

    from hsstore.cli.errors import CliError

    url = given.strip() if "://" in given else f"http://{given.strip()}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.rstrip("/").endswith("/v1"):
        raise CliError(
            f"--url {given!r} is not a service's base URL",
            f"give it as http://HOST:PORT or HOST:PORT, e.g. {DEFAULT_URL} (no /v1: the client adds the paths)",
        )
    return url


@dataclass(frozen=True, slots=True)
class Connection:
    """The service every command of one invocation talks to: the root's `--url` and `--token`."""

    url: str
    token: str | None


def client_of(ctx: typer.Context) -> FeatureClient:
    """A client of the service the command line names (`--url`, `--token`, given anywhere on it)."""
    from client import FeatureClient  # on first use: `hsstore --help` needs no client

    connection: Connection = ctx.find_root().obj
    return FeatureClient(service_url(connection.url), connection.token)


INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def stoppable() -> Iterator[None]:
    """SIGTERM as Ctrl-C inside a command that reports what it did before it stops (KeyboardInterrupt)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
