"""`hsstore jobs` and `hsstore window`: what operators run around SGLang's downtime windows."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from typer.core import TyperGroup

from hsstore.cli import output as out
from hsstore.cli.options import JsonOption, client_of, console


class _JobsGroup(TyperGroup):
    """`hsstore jobs ID` shows that job, as `hsstore jobs show ID` does: a word that names no subcommand is a job
    id (or a prefix of one)."""

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> tuple:  # type: ignore[override]  # typer's own
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().resolve_command(ctx, args)


jobs_app = typer.Typer(
    help="Warm jobs: list them (no subcommand), show one, cancel one",
    cls=_JobsGroup,
    invoke_without_command=True,
    rich_markup_mode=None,
)


@jobs_app.callback()
def jobs(
    ctx: typer.Context,
    as_json: JsonOption = False,
) -> None:
    """List warm jobs (or, with a subcommand, show or cancel one)."""
    if ctx.invoked_subcommand is not None:
        return
    with client_of(ctx) as client:
        listed = client.jobs()
    if as_json:
        typer.echo(json.dumps([job.model_dump(mode="json") for job in listed], indent=2))
    elif listed:
        out.print_jobs(listed)
    else:
        console.print("no jobs")


def jobs_show(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="the job's id or a unique prefix")],
    as_json: JsonOption = False,
) -> None:
    """One job: done / total, tokens, tok/s, per-sample errors."""
    with client_of(ctx) as client:
        job = client.job(job_id)
    if as_json or (ctx.parent is not None and ctx.parent.params.get("as_json")):
        typer.echo(job.model_dump_json(indent=2))
    else:
        out.print_job(job)


def jobs_cancel(
    ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="the job's id or a unique prefix")]
) -> None:
    """Cancel a job: its pending samples are not extracted; what it stored stays."""
    with client_of(ctx) as client:
        cancelled = client.cancel_job(job_id)
    console.print(f"job {cancelled.id}: {cancelled.state}")


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
    """What needs an operator's eye: a mode this host could not run (layer replays, fused forwards), SGLang's canary
    after the last window, and every stored entry the content checks flagged as unusual, a scrub found damaged, or an
    import the model's check found wrong, marked suspect or could not vet (kept current by the service: as quick in a
    store of 10^7 entries as in one of 10). Exit 1 when anything is listed."""
    with client_of(ctx) as client:
        window = client.window()
        report = client.health(limit=_SHOWN * 3)
        run = client.info().run
    degraded = run.degraded if run is not None else {}
    for mode, why in degraded.items():  # a mode asked for that could not run on this device
        typer.echo(f"degraded {mode}: {why}")
    tallies = report.tallies
    entries, flagged, damaged, suspect, unchecked = (sum(getattr(t, part) for t in tallies) for part in _COUNTS)
    typer.echo(out.window_line(window))
    typer.echo(
        f"{entries} entries: {flagged} flagged by the content checks, {damaged} damaged, {suspect} "
        f"imports to check against the model; {unchecked} never checked (hsstore audit, hsstore verify)"
    )
    shown = report.attention
    for manifest in [m for m in shown if m.content_flags][:_SHOWN]:
        typer.echo(f"  flagged {manifest.prompt_hash[: out.SHORT]} {manifest.backend}: {manifest.content_flags[0]}")
    for manifest in [m for m in shown if m.corrupt][:_SHOWN]:
        typer.echo(f"  damaged {manifest.prompt_hash[: out.SHORT]} {manifest.backend} ({manifest.content_hash})")
    for manifest in [m for m in shown if m.suspect][:_SHOWN]:
        audit = manifest.audit
        status, detail = (audit.status, audit.detail) if audit is not None else ("", "")
        typer.echo(f"  {status} {manifest.prompt_hash[: out.SHORT]} {manifest.backend}: {detail}")
    if suspect:
        typer.echo("  (check them against the model once its weights are here: hsstore audit --imports)")
    if flagged or damaged or suspect or degraded or window.sglang_canary == "mismatch":
        raise typer.Exit(1)


_SHOWN = 50  # of each kind
_COUNTS = ("entries", "flagged", "damaged", "suspect", "unchecked")


window_app = typer.Typer(
    help="Downtime windows: when SGLang lends the GPU", no_args_is_help=True, rich_markup_mode=None
)


def window_status(ctx: typer.Context) -> None:
    """Whether extraction may run now, until when, and when the next scheduled window opens."""
    with client_of(ctx) as client:
        typer.echo(out.window_line(client.window()))


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


def window_close(ctx: typer.Context) -> None:
    """Close the window now; work stops at the next batch boundary and the GPU goes back to SGLang."""
    with client_of(ctx) as client:
        state = client.close_window()
    typer.echo(out.window_line(state))
    if state.source == "always":
        console.print(f"nothing to close: {_ALWAYS}")
