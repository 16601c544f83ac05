"""`hsstore export` and `hsstore import`: stored entries to and from SpecForge's and speculators' offline datasets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hsstore.cli.errors import CliError
from hsstore.cli.inputs import key_lines, since_option
from hsstore.cli.options import DtypeOption, FeaturesetOption, client_of, console, progress_bar
from schemas.exchange import ExchangeFormat, formats_help
from schemas.featureset import FeatureSet, parse_layers
from schemas.keys import EntryFilters

FormatOption = Annotated[ExchangeFormat, typer.Option("--format", help=formats_help())]


def export(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Argument(help="a new (or empty) directory")],
    fmt: FormatOption,
    model_revision: Annotated[str | None, typer.Option()] = None,
    backend: Annotated[str | None, typer.Option()] = None,
    featureset: FeaturesetOption = None,
    prompt_hash: Annotated[str | None, typer.Option(help="a prompt hash or a prefix of one")] = None,
    since: Annotated[str | None, typer.Option(help="ISO-8601 time, or an age: 30m, 12h, 7d")] = None,
    hashes: Annotated[Path | None, typer.Option(help="JSONL of prompt hashes (e.g. `hsstore extract --json`)")] = None,
    layers: Annotated[
        str | None,
        typer.Option(help="a subset of the featureset's layers (hsstore ids); with no --featureset, any holding them"),
    ] = None,
    dtype: DtypeOption = "bfloat16",
    num_layers: Annotated[int | None, typer.Option(help="the model's layers, if the service does not run it")] = None,
    replace: Annotated[bool, typer.Option(help="replace an earlier hsstore export in OUT_DIR")] = False,
) -> None:
    """Write the newest version of each matching entry as a SpecForge or speculators dataset, with
    hsstore_export.json naming the layer convention, model revision, backend and every entry's hashes."""
    from client.exchange import choose
    from client.exchange import export as write_export

    def filters(prompt: str | None, since: str | None = None) -> EntryFilters:
        return EntryFilters(
            prompt_hash=prompt, since=since, model_revision=model_revision, backend=backend, featureset=featureset
        )

    with client_of(ctx) as client:
        if hashes is not None:
            listing = [filters(line["prompt_hash"]) for line in key_lines(hashes)]
        else:
            listing = [filters(prompt_hash, since_option(since))]
        chosen = parse_layers(layers) if layers else None
        try:  # --dtype as typed: pydantic refuses a name it does not know (below, in words)
            holding = FeatureSet(layers=chosen, dtype=dtype) if chosen and featureset is None else None  # type: ignore[arg-type]
        except ValueError as exc:
            raise CliError(f"--dtype {dtype!r}: {exc}") from None
        picked = choose(client, listing, measured_only=backend is None, holding=holding)  # keys, not manifests
        if not picked.keys:
            raise CliError("no entries match", "list them with `hsstore entries` and the same filters")
        model = client.info().model
        if num_layers is None and model is not None and model.model_revision == picked.keys[0].model_revision:
            num_layers = model.num_layers
        with progress_bar() as progress:
            task = progress.add_task("export", total=len(picked.keys))
            try:
                written = write_export(
                    client, picked, fmt, out_dir, chosen, num_layers, lambda: progress.advance(task), replace
                )
            except ValueError as exc:
                raise CliError(str(exc)) from None
    index = written.header
    console.print(
        f"exported {written.entries} entries to {out_dir} ({fmt}): layer ids {index.layer_ids} "
        f"({index.layer_convention.split(':')[0]} convention; hsstore layers {index.layers}), "
        f"model_revision {index.model_revision}, backend {index.backend}"
    )


def import_(
    ctx: typer.Context,
    in_dir: Annotated[Path, typer.Argument(help="an hsstore export, or a SpecForge / speculators dataset")],
    fmt: Annotated[
        ExchangeFormat | None, typer.Option("--format", help=f"{formats_help()}; an export names its own")
    ] = None,
    model_revision: Annotated[
        str | None, typer.Option(help="the model the features came from (default: the export's, else the service's)")
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="state the backend that computed them (else: unknown); recorded as stated")
    ] = None,
    layer_ids: Annotated[
        str | None, typer.Option(help="the files' layer ids in their format's convention, e.g. 2,32,61,64")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON line per file")] = False,
) -> None:
    """Import a dataset into the store, verified: shapes checked, content hashed here and by the service. Entries
    already stored with the same bits are left as they are, so an import can be re-run."""
    from client.exchange import FormatError, import_dir, plan_import

    ids = [int(i) for i in layer_ids.split(",")] if layer_ids else None
    if not in_dir.is_dir():
        raise CliError(f"{in_dir} is not a directory")
    with client_of(ctx) as client:
        try:
            plan = plan_import(client, in_dir, fmt, model_revision, ids)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if plan.index is not None and backend is None:
            console.print(
                f"the export recorded backend {plan.index.backend}; stored as 'unknown' unless you state it "
                f"(--backend {plan.index.backend})"
            )
        with progress_bar() as progress:
            task = progress.add_task("import", total=len(plan.files))
            try:
                summary = import_dir(client, in_dir, plan, backend, lambda: progress.advance(task))
            except FormatError as exc:
                raise CliError(str(exc)) from None
    for warning in summary.warnings:
        console.print(f"warning: {warning}")
    if as_json:
        for result in summary.results:
            record = {
                "prompt_hash": result.prompt_hash,
                "status": result.status,
                "source": result.manifest.fingerprint.imported_from,
                "content_hash": result.manifest.content_hash,
            }
            typer.echo(json.dumps(record))
    counts = ", ".join(f"{n} {status}" for status, n in summary.counts.items())
    console.print(f"{plan.fmt} -> model_revision {plan.model_revision}, backend {backend or 'unknown'}: {counts}")
