"""`hsstore dataset`: named, immutable snapshots of whole versions for training runs to name."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hsstore.cli.inputs import key_lines, since_option
from hsstore.cli.options import FeaturesetOption, JsonOption, client_of, console

dataset_app = typer.Typer(
    help="Dataset snapshots: exactly these versions, by one id", no_args_is_help=True, rich_markup_mode=None
)


def dataset_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="letters, digits, . _ -")],
    keys: Annotated[
        Path | None,
        typer.Option(help="JSONL of keys: objects with prompt_hash and any other key parts (`hsstore extract --json`)"),
    ] = None,
    backend: Annotated[str | None, typer.Option()] = None,
    model_revision: Annotated[str | None, typer.Option()] = None,
    featureset: FeaturesetOption = None,
    since: Annotated[str | None, typer.Option(help="ISO-8601 time, or an age: 30m, 12h, 7d")] = None,
    as_json: JsonOption = False,
) -> None:
    """Snapshot the keys of a JSONL file (each resolved to its newest version), or every version the listing's
    filters show; prints the dataset id a training run names (`EntryStream.of_dataset(url, ID)`)."""
    listed = _keys(keys) if keys is not None else None
    with client_of(ctx) as client:
        info = client.create_dataset(
            name,
            listed,
            backend=backend,
            model_revision=model_revision,
            featureset=featureset,
            since=since_option(since),
        )
    if as_json:
        typer.echo(info.model_dump_json(indent=2))
        return
    console.print(
        f"dataset {info.name}: {info.dataset_id} ({info.entries} entries, {info.tokens} tokens, {info.bytes} bytes)"
    )


def dataset_show(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="a dataset id or name")],
    as_json: JsonOption = False,
) -> None:
    """A dataset's id, entries, tokens and size."""
    with client_of(ctx) as client:
        info = client.dataset_info(ref)
    if as_json:
        typer.echo(info.model_dump_json(indent=2))
        return
    console.print(
        f"dataset {info.name}: {info.dataset_id} ({info.entries} entries, {info.tokens} tokens, "
        f"{info.bytes} bytes, created {info.created_at})"
    )


def _keys(path: Path) -> list[dict]:
    return [{k: v for k, v in line.items() if k in _KEY_PARTS} for line in key_lines(path)]


_KEY_PARTS = ("prompt_hash", "model_revision", "backend", "featureset", "content_hash")
