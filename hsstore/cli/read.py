"""`hsstore get`, `entries`, `compare` and `audit`: reading what is stored. Ids print as unique prefixes that every
command takes back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hsstore.cli import output as out
from hsstore.cli.inputs import resolve_content_hash, resolve_prompt_hash, since_option
from hsstore.cli.options import FeaturesetOption, client_of, console


def get(
    ctx: typer.Context,
    prompt_hash: Annotated[str, typer.Argument(help="prompt hash, or a unique prefix as `hsstore entries` prints")],
    backend: Annotated[str | None, typer.Option()] = None,
    model_revision: Annotated[str | None, typer.Option()] = None,
    featureset: FeaturesetOption = None,
    content_hash: Annotated[str | None, typer.Option(help="a version's content hash, or a unique prefix")] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write the verified tensors as a .safetensors file")
    ] = None,
) -> None:
    """Fetch one entry, verify it, print its manifest summary (and write it with --out)."""
    from schemas import safetensors_body

    with client_of(ctx) as client:
        whole = resolve_prompt_hash(client, prompt_hash, backend=backend)
        features = client.get(
            prompt_hash=whole,
            backend=backend,
            model_revision=model_revision,
            featureset=featureset,
            content_hash=resolve_content_hash(client, whole, content_hash),
        )
    m = features.manifest
    hidden = features.tensors["hidden_states"]
    typer.echo(
        f"prompt_hash     {m.prompt_hash}\ncontent_hash    {m.content_hash} (verified)\n"
        f"backend         {m.backend}\nmodel_revision  {m.model_revision}\n"
        f"featureset      {m.featureset_id} layers={list(m.featureset.layers)}\n"
        f"hidden_states   {list(hidden.shape)} {hidden.dtype}"
    )
    if out_file is not None:
        body = safetensors_body.encode(features.tensors.values(), {"manifest": m.model_dump_json()})
        out_file.write_bytes(body)
        tensors = ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in features.tensors.values())
        typer.echo(f"wrote {out_file} ({len(body):,} bytes, safetensors): {tensors}")


# What `entries --json` leaves out unless --full: the featureset's id stays, its layers and the fingerprint (a
# hundred lines an entry) go
BULKY = {"fingerprint", "featureset", "layer_stats"}


def entries(
    ctx: typer.Context,
    prompt_hash: Annotated[str | None, typer.Option(help="a prompt hash or a prefix of one")] = None,
    backend: Annotated[str | None, typer.Option()] = None,
    model_revision: Annotated[str | None, typer.Option()] = None,
    featureset: FeaturesetOption = None,
    since: Annotated[str | None, typer.Option(help="ISO-8601 time, or an age: 30m, 12h, 7d")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="entries per page")] = 50,
    cursor: Annotated[str | None, typer.Option(help="the cursor a previous page printed")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per line and entry (whole ids), instead of columns")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="with --json: each entry whole, fingerprint included")] = False,
) -> None:
    """List stored entry versions, oldest first, one page at a time. Printed ids are unique prefixes that every
    command accepts."""
    with client_of(ctx) as client:
        page = client.entries_page(
            prompt_hash=prompt_hash,
            backend=backend,
            model_revision=model_revision,
            featureset=featureset,
            since=since_option(since),
            limit=limit,
            cursor=cursor,
        )
    if as_json:
        for entry in page.entries:
            typer.echo(entry.model_dump_json(exclude=None if full else BULKY))
        if page.next_cursor is not None:  # stdout stays one entry per line
            typer.echo(f"more: hsstore entries --json --cursor {page.next_cursor} (with the same filters)", err=True)
        return
    if page.entries:
        out.print_entries(page.entries)
    else:
        console.print("no entries match")
    if page.next_cursor is not None:
        console.print(f"more: hsstore entries --cursor {page.next_cursor} (with the same filters)")


def compare(
    ctx: typer.Context,
    prompt_hash: Annotated[str, typer.Argument(help="prompt hash, or a unique prefix")],
    a: Annotated[str, typer.Option(help="first backend")] = "fla",
    b: Annotated[str, typer.Option(help="second backend")] = "torch",
    featureset: FeaturesetOption = None,
    extract: Annotated[bool, typer.Option(help="extract a missing side")] = False,
) -> None:
    """Per-layer cosine (mean, min), max |diff| and bitwise-equal fraction of two backends' features."""
    with client_of(ctx) as client:
        whole = resolve_prompt_hash(client, prompt_hash)
        doing = f"comparing {a} with {b} for {whole[: out.SHORT]}" + (" (extracting a missing side)" if extract else "")
        with console.status(doing):
            report = client.compare(prompt_hash=whole, a=a, b=b, featureset=featureset, extract=extract)
    typer.echo(f"{a} vs {b}: {report.num_tokens} tokens, extracted now: {', '.join(report.extracted) or 'none'}")
    rows = [
        (
            str(row.layer),
            f"{row.cosine_mean:.6f}",
            f"{row.cosine_min:.6f}",
            f"{row.max_abs_diff:.4g}",
            f"{row.bitwise_equal_fraction:.2%}",
        )
        for row in report.layers
    ]
    out.table(("LAYER", "COSINE MEAN", "COSINE MIN", "MAX |DIFF|", "BITWISE EQUAL"), rows, frozenset({1, 2, 3, 4}))


def audit(
    ctx: typer.Context,
    sample: Annotated[int, typer.Option(min=1, help="how many stored entries to re-extract")] = 20,
    backend: Annotated[str | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    imports: Annotated[
        bool,
        typer.Option(
            "--imports",
            help="spot-check imports never checked against the model (or suspect) instead, once its weights "
            "are at hand",
        ),
    ] = False,
) -> None:
    """Re-extract stored entries and report which reproduce their content hash bit for bit (with --imports: check
    imported entries against the model's own features)."""
    doing = "checking imports against the model" if imports else "re-extracting stored entries and comparing bits"
    with console.status(f"{doing} (up to {sample})"), client_of(ctx) as c:
        report = c.audit(sample, backend, seed, imports)
    prompts = out.short_ids(r.prompt_hash for r in report.results)
    for result in report.results:
        if result.stored != "intact":
            mark = "STORED BYTES CORRUPT (marked; extract again to repair)"
        elif imports:
            mark = ("agrees: " if result.reproduced else "DISAGREES (marked suspect): ") + (result.detail or "")
        else:
            mark = "reproduced" if result.reproduced else f"MISMATCH: now {result.reproduced_hash}"
        typer.echo(f"{prompts[result.prompt_hash]}  {result.backend:10}  {result.content_hash[:23]}  {mark}")
    skipped = f"; skipped {report.skipped}: {report.skipped_reason}" if report.skipped else ""
    verdict = "agree with the model" if imports else "reproduced bit for bit"
    typer.echo(f"{report.reproduced}/{report.total} {verdict}{skipped}")
    if report.mismatched:
        raise typer.Exit(1)
