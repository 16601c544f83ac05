"""`hsstore jobs` and `hsstore window`: what operators run around SGLang's downtime windows."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from hsstore import cli_output as out
from hsstore.cli_options import JsonOption, client_of, console


def jobs(
    ctx: typer.Context,
    job_id: Annotated[str | None, typer.Argument(help="show this job (its id or a unique prefix)")] = None,
    cancel: Annotated[str | None, typer.Option(help="cancel this job (its id or a unique prefix)")] = None,
    as_json: JsonOption = False,
) -> None:
    """List warm jobs, show one, or cancel one."""
    with client_of(ctx) as client:
        if cancel:
            cancelled = client.cancel_job(cancel)
            console.print(f"job {cancelled.id}: {cancelled.state}")
        if job_id is not None:
            job = client.job(job_id)
            if as_json:
                typer.echo(job.model_dump_json(indent=2))
            else:
                out.print_job(job)
            return
        listed = client.jobs()
    if as_json:
        typer.echo(json.dumps([job.model_dump(mode="json") for job in listed], indent=2))
    elif listed:
        out.print_jobs(listed)
    else:
        console.print("no jobs")


# What `window open` and `close` say on a service without windows: both succeed, neither changes anything
_ALWAYS = (
    "this service has no schedule and no hand-over, so the GPU is always its own "
    "(configure `windows` or `handover` to share it with SGLang)"
)


def workers(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Live workers of the cluster: the job items each holds under a lease, and when its lease runs out unless its
    heartbeat renews it. A worker that holds nothing is idle (or gone): nothing in the catalog says which."""
    with client_of(ctx) as client:
        leases = client.workers()
    if as_json:
        typer.echo(json.dumps([lease.model_dump() for lease in leases], indent=2))
    elif leases:
        rows = [
            (lease.worker, lease.job_id[: out.SHORT], str(lease.items), f"{lease.expires_in_s:.0f} s")
            for lease in leases
        ]
        out.table(("WORKER", "JOB", "ITEMS", "LEASE LEFT"), rows, frozenset({2, 3}))
    else:
        console.print("no worker holds a lease now")


def health(ctx: typer.Context) -> None:
    """What needs an operator's eye: SGLang's canary after the last window, and every stored entry the content
    checks flagged as unusual or a scrub found damaged (listed through the catalog, a page at a time). Exit 1 when
    anything is listed."""
    with client_of(ctx) as client:
        window = client.window()
        flagged, corrupt, total = [], [], 0
        for manifest in client.entries(page_size=1000):
            total += 1
            if manifest.content_flags:
                flagged.append(manifest)
            if manifest.corrupt:
                corrupt.append(manifest)
    typer.echo(out.window_line(window))
    typer.echo(f"{total} entries: {len(flagged)} flagged by the content checks, {len(corrupt)} damaged")
    for manifest in flagged[:50]:
        typer.echo(f"  flagged {manifest.prompt_hash[: out.SHORT]} {manifest.backend}: {manifest.content_flags[0]}")
    for manifest in corrupt[:50]:
        typer.echo(f"  damaged {manifest.prompt_hash[: out.SHORT]} {manifest.backend} ({manifest.content_hash})")
    if flagged or corrupt or window.sglang_canary == "mismatch":
        raise typer.Exit(1)


window_app = typer.Typer(help="Downtime windows: when SGLang lends the GPU", no_args_is_help=True)


@window_app.command("status")
def window_status(ctx: typer.Context) -> None:
    """Whether extraction may run now, until when, and when the next scheduled window opens."""
    with client_of(ctx) as client:
        typer.echo(out.window_line(client.window()))


@window_app.command("open")
def window_open(
    ctx: typer.Context,
    minutes: Annotated[float, typer.Option(min=0.1, help="how long SGLang lends the GPU")],
) -> None:
    """Open a manual window now (SGLang is asked for the GPU when work needs it)."""
    with client_of(ctx) as client:
        state = client.open_window(minutes)
    typer.echo(out.window_line(state))
    if state.source == "always":
        console.print(f"nothing to open: {_ALWAYS}")


@window_app.command("close")
def window_close(ctx: typer.Context) -> None:
    """Close the window now; work stops at the next batch boundary and the GPU goes back to SGLang."""
    with client_of(ctx) as client:
        state = client.close_window()
    typer.echo(out.window_line(state))
    if state.source == "always":
        console.print(f"nothing to close: {_ALWAYS}")
