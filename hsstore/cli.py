"""The `hsstore` command line: serve, build the tiny model, extract, warm, list, fetch, compare, audit, windows.

Commands that only talk to a service import neither torch nor the service: they start in a fraction of a second.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hsstore import cli_output as out
from hsstore.cli_errors import CliError, ErrorReportingGroup
from hsstore.cli_input import (
    SampleFile,
    featureset_option,
    resolve_content_hash,
    resolve_prompt_hash,
    since_option,
)

if TYPE_CHECKING:
    from client import FeatureClient

app = typer.Typer(
    help="hsstore: a hidden-state feature store",
    cls=ErrorReportingGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)  # progress and spinners; results go to stdout

DEFAULT_URL = "http://127.0.0.1:8000"
UrlOption = Annotated[str, typer.Option(envvar="HSSTORE_URL", help="service base URL (or HSSTORE_URL)")]
TokenOption = Annotated[str | None, typer.Option(envvar="HSSTORE_TOKEN", help="bearer token (or HSSTORE_TOKEN)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON (whole ids) instead of columns")]
# Files are checked by the command itself, so a missing one is a one-line error like every other
SamplesArgument = Annotated[Path, typer.Argument(help="JSONL file, one sample per line")]


@app.callback()
def main(
    debug: Annotated[
        bool, typer.Option("--debug", help="show the traceback when a command fails (or HSSTORE_DEBUG=1)")
    ] = False,
) -> None:
    """hsstore: a hidden-state feature store."""


def _client(url: str, token: str | None) -> FeatureClient:
    from client import FeatureClient

    return FeatureClient(url, token)


def _progress(label: str) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file (or HSSTORE_CONFIG)")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="model directory (overrides settings)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="store directory (overrides settings)")] = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Run the service: load the model (now, or when a window opens) and serve the store. Logs every request."""
    import uvicorn

    from service.main import create_app
    from service.settings import Settings

    overrides = {
        k: v
        for k, v in {"model_dir": model_dir, "data_dir": data_dir, "host": host, "port": port}.items()
        if v is not None
    }
    settings = Settings.load(config, **overrides)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info", access_log=True)


@app.command()
def devmodel(
    out_dir: Path,
    multimodal: Annotated[bool, typer.Option(help="write the Qwen3_5ForConditionalGeneration layout")] = False,
    head_dim: Annotated[int, typer.Option(help="16: the 64-wide CPU model; 64: a 256-wide one for GPU kernels")] = 16,
) -> None:
    """Write the tiny Qwen3.5 test model (random weights from a fixed seed, tokenizer trained here)."""
    from schemas.model_revision import model_revision
    from service.model.devmodel import build_devmodel

    build_devmodel(out_dir, multimodal=multimodal, head_dim=head_dim)
    typer.echo(f"{out_dir}  model_revision={model_revision(out_dir)}")


@app.command()
def extract(
    jsonl: SamplesArgument,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option(help="auto, fla, fla-noconv or torch")] = None,
    layers: Annotated[str | None, typer.Option(help="layer ids, any order: 1,16,embed (default: DFlash's)")] = None,
    batch: Annotated[int, typer.Option(min=1, help="samples per request")] = 8,
    as_json: JsonOption = False,
) -> None:
    """Extract (or find stored) features for every sample of a JSONL file now; prints each sample's prompt hash."""
    samples = SampleFile(jsonl)
    featureset = featureset_option(layers)
    counts = {"extracted": 0, "existing": 0}
    with _client(url, token) as client, _progress("extract") as progress:
        task = progress.add_task("extract", total=len(samples.samples))
        for start in range(0, len(samples.samples), batch):
            try:
                response = client.extract(
                    samples.samples[start : start + batch], featureset=featureset, backend=backend
                )
            except Exception as exc:
                _stopped_after(exc, samples, start, counts)
                raise
            if start == 0 and not as_json and response.results:
                m = response.results[0].manifest
                layer_list = ",".join(map(str, m.featureset.layers))
                typer.echo(f"featureset {m.featureset_id} (layers {layer_list}), backend {m.backend}")
            for offset, result in enumerate(response.results):
                index = start + offset
                if as_json:
                    record = {
                        "line": samples.lines[index],
                        "id": result.sample_id,
                        "prompt_hash": result.prompt_hash,
                        "status": result.status,
                        "backend": result.manifest.backend,
                        "featureset": result.manifest.featureset_id,
                        "content_hash": result.manifest.content_hash,
                    }
                    typer.echo(json.dumps(record))
                else:
                    typer.echo(f"{result.status:13} {result.prompt_hash[: out.SHORT]}  {samples.label(index)}")
            counts["extracted"] += response.extracted
            counts["existing"] += response.existing
            progress.advance(task, len(response.results))
    console.print(f"{counts['extracted']} extracted, {counts['existing']} already stored")


def _stopped_after(exc: Exception, samples: SampleFile, start: int, counts: dict[str, int]) -> None:
    """Say where a multi-request extraction stopped, so nothing looks half-done without saying so."""
    from client import HsstoreError

    if isinstance(exc, HsstoreError):
        exc.message = samples.locate(exc.message, offset=start)
    if start:
        stored = counts["extracted"] + counts["existing"]
        last = samples.lines[start - 1]
        raise CliError(
            getattr(exc, "message", str(exc)),
            f"the first {stored} samples (to line {last}) were stored before this; "
            "running the command again skips them",
        ) from exc


@app.command()
def warm(
    jsonl: SamplesArgument,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[
        list[str] | None, typer.Option(help="fla, fla-noconv, torch or auto; repeat for several")
    ] = None,
    completion: Annotated[str | None, typer.Option(help="greedy:N for samples without a completion")] = None,
    layers: Annotated[str | None, typer.Option(help="layer ids, any order: 1,16,embed (default: DFlash's)")] = None,
    priority: Annotated[int, typer.Option()] = 0,
    now: Annotated[bool, typer.Option("--now", help="run outside any window (admin)")] = False,
    wait: Annotated[bool, typer.Option(help="follow the job with a progress bar until it ends")] = True,
) -> None:
    """Submit a warm job from a JSONL file (one sample per line); it runs in the next downtime window."""
    from client import HsstoreError

    samples = SampleFile(jsonl)
    featureset = featureset_option(layers)
    with _client(url, token) as client:
        try:
            status = client.submit_job(
                jsonl=jsonl.read_bytes(),
                backends=backend or ["auto"],
                completion=completion,
                priority=priority,
                layers=featureset.layers if featureset else None,
                run_now=now,
            )
        except HsstoreError as exc:
            exc.message = samples.locate(exc.message)
            raise
        typer.echo(
            f"job {status.id}: {status.total} items ({len(samples.samples)} samples x {', '.join(status.backends)}), "
            f"featureset {status.featureset_id}"
        )
        if not wait:
            return
        with _progress("warm") as progress:
            task = progress.add_task("warm", total=status.total)
            while status.state in ("queued", "running"):
                note = " (waiting for a window)" if status.waiting_for_window else ""
                rate = f" {status.tokens_per_s:,.0f} tok/s" if status.tokens_per_s else ""
                progress.update(task, completed=status.done + status.failed, description=f"warm{rate}{note}")
                time.sleep(1.0)
                status = client.job(status.id)
    rate = f", {status.tokens_per_s:,.0f} tok/s" if status.tokens_per_s else ""
    typer.echo(f"{status.state}: {status.done} stored, {status.failed} failed, {status.tokens:,} tokens{rate}")
    for error in status.errors[:20]:
        typer.echo(f"  {samples.where(error.index)} ({error.backend}): {error.message}")
    if status.error:
        typer.echo(f"  {status.error}")
    if status.state != "done":
        raise typer.Exit(1)


@app.command()
def jobs(
    job_id: Annotated[str | None, typer.Argument(help="show this job (its id or a unique prefix)")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    cancel: Annotated[str | None, typer.Option(help="cancel this job (its id or a unique prefix)")] = None,
    as_json: JsonOption = False,
) -> None:
    """List warm jobs, show one, or cancel one."""
    with _client(url, token) as client:
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


window_app = typer.Typer(help="Downtime windows: when SGLang lends the GPU", no_args_is_help=True)
app.add_typer(window_app, name="window")


@window_app.command("status")
def window_status(url: UrlOption = DEFAULT_URL, token: TokenOption = None) -> None:
    """Whether extraction may run now, until when, and when the next scheduled window opens."""
    with _client(url, token) as client:
        typer.echo(out.window_line(client.window()))


@window_app.command("open")
def window_open(
    minutes: Annotated[float, typer.Option(min=0.1, help="how long SGLang lends the GPU")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Open a manual window now (SGLang is asked for the GPU when work needs it)."""
    with _client(url, token) as client:
        typer.echo(out.window_line(client.open_window(minutes)))


@window_app.command("close")
def window_close(url: UrlOption = DEFAULT_URL, token: TokenOption = None) -> None:
    """Close the window now; work stops at the next batch boundary and the GPU goes back to SGLang."""
    with _client(url, token) as client:
        state = client.close_window()
    if state.source == "always":
        raise CliError(
            "nothing to close: this service has no schedule and no hand-over, so the GPU is always its own",
            "configure `windows` or `handover` to share the GPU with SGLang",
        )
    typer.echo(out.window_line(state))


@app.command()
def get(
    prompt_hash: Annotated[str, typer.Argument(help="prompt hash, or a unique prefix as `hsstore entries` prints")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option()] = None,
    model_revision: Annotated[str | None, typer.Option()] = None,
    featureset: Annotated[str | None, typer.Option(help="featureset id")] = None,
    content_hash: Annotated[str | None, typer.Option(help="a version's content hash, or a unique prefix")] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write the verified tensors as a .safetensors file")
    ] = None,
) -> None:
    """Fetch one entry, verify it, print its manifest summary (and write it with --out)."""
    from schemas import wire

    with _client(url, token) as client:
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
        body = wire.encode(features.tensors.values(), {"manifest": m.model_dump_json()})
        out_file.write_bytes(body)
        tensors = ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in features.tensors.values())
        typer.echo(f"wrote {out_file} ({len(body):,} bytes, safetensors): {tensors}")


@app.command()
def entries(
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    prompt_hash: Annotated[str | None, typer.Option(help="a prompt hash or a prefix of one")] = None,
    backend: Annotated[str | None, typer.Option()] = None,
    model_revision: Annotated[str | None, typer.Option()] = None,
    featureset: Annotated[str | None, typer.Option(help="featureset id")] = None,
    since: Annotated[str | None, typer.Option(help="ISO-8601 time, or an age: 30m, 12h, 7d")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="entries per page")] = 50,
    cursor: Annotated[str | None, typer.Option(help="the cursor a previous page printed")] = None,
    as_json: JsonOption = False,
) -> None:
    """List stored entry versions, oldest first, one page at a time. Printed ids are unique prefixes that every
    command accepts."""
    with _client(url, token) as client:
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
        typer.echo(page.model_dump_json(indent=2))
        return
    if page.entries:
        out.print_entries(page.entries)
    else:
        console.print("no entries match")
    if page.next_cursor is not None:
        console.print(f"more: hsstore entries --cursor {page.next_cursor} (with the same filters)")


@app.command()
def compare(
    prompt_hash: Annotated[str, typer.Argument(help="prompt hash, or a unique prefix")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    a: Annotated[str, typer.Option(help="first backend")] = "fla",
    b: Annotated[str, typer.Option(help="second backend")] = "torch",
    featureset: Annotated[str | None, typer.Option(help="featureset id")] = None,
    extract: Annotated[bool, typer.Option(help="extract a missing side")] = False,
) -> None:
    """Per-layer cosine (mean, min), max |diff| and bitwise-equal fraction of two backends' features."""
    with _client(url, token) as client:
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


@app.command()
def audit(
    sample: Annotated[int, typer.Option(min=1, help="how many stored entries to re-extract")] = 20,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Re-extract stored entries and report which reproduce their content hash bit for bit."""
    with console.status(f"re-extracting up to {sample} stored entries and comparing bits"), _client(url, token) as c:
        report = c.audit(sample, backend, seed)
    prompts = out.short_ids(r.prompt_hash for r in report.results)
    for result in report.results:
        mark = "reproduced" if result.reproduced else f"MISMATCH: now {result.reproduced_hash}"
        typer.echo(f"{prompts[result.prompt_hash]}  {result.backend:10}  {result.content_hash[:23]}  {mark}")
    skipped = f"; skipped {report.skipped}: {report.skipped_reason}" if report.skipped else ""
    typer.echo(f"{report.reproduced}/{report.total} reproduced bit for bit{skipped}")
    if report.mismatched:
        raise typer.Exit(1)


@app.command("rebuild-catalog")
def rebuild_catalog(data_dir: Path) -> None:
    """Re-create catalog rows from the manifest documents stored beside the blobs."""
    from service.main import build_services
    from service.settings import Settings

    services = build_services(Settings.load(data_dir=data_dir, model_dir=None))
    try:
        typer.echo(f"{services.writer.rebuild_catalog()} versions re-added")
    finally:
        services.close()


if __name__ == "__main__":
    app()
