"""The `hsstore` command line: serve, build the tiny model, extract, fetch, list."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from schemas.api import WindowState

app = typer.Typer(help="hsstore: a hidden-state feature store", no_args_is_help=True, add_completion=False)
console = Console()

UrlOption = Annotated[str, typer.Option(envvar="HSSTORE_URL", help="service base URL")]
TokenOption = Annotated[str | None, typer.Option(envvar="HSSTORE_TOKEN", help="bearer token")]
DEFAULT_URL = "http://127.0.0.1:8000"


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="model directory (overrides settings)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="store directory (overrides settings)")] = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Run the service (loads the model once, serves the store)."""
    import uvicorn

    from service.main import create_app
    from service.settings import CONFIG_ENV, Settings

    if config is not None:
        os.environ[CONFIG_ENV] = str(config)
    overrides = {
        k: v
        for k, v in {"model_dir": model_dir, "data_dir": data_dir, "host": host, "port": port}.items()
        if v is not None
    }
    settings = Settings(**overrides)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")


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
    console.print(f"{out_dir}  model_revision={model_revision(out_dir)}")


def _read_jsonl(path: Path) -> list[dict]:
    samples = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                samples.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise typer.BadParameter(f"{path}:{number}: {exc}") from None
    return samples


@app.command()
def extract(
    jsonl: Path,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option(help="auto, fla, fla-noconv or torch")] = None,
    layers: Annotated[str | None, typer.Option(help="comma-separated layer ids (default: the DFlash layers)")] = None,
    batch: Annotated[int, typer.Option(min=1)] = 8,
) -> None:
    """Extract (or find stored) features for every sample of a JSONL file now."""
    from client import FeatureClient
    from schemas.featureset import parse_layer

    samples = _read_jsonl(jsonl)
    featureset = [parse_layer(t) for t in layers.split(",")] if layers else None
    counts = {"extracted": 0, "existing": 0}
    with (
        FeatureClient(url, token) as client,
        Progress(
            TextColumn("extract"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress,
    ):
        task = progress.add_task("extract", total=len(samples))
        for start in range(0, len(samples), batch):
            response = client.extract(samples[start : start + batch], featureset=featureset, backend=backend)
            counts["extracted"] += response.extracted
            counts["existing"] += response.existing
            progress.advance(task, len(response.results))
    console.print(f"{counts['extracted']} extracted, {counts['existing']} already stored")


@app.command()
def warm(
    jsonl: Path,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[
        list[str] | None, typer.Option(help="fla, fla-noconv, torch or auto; repeat for several")
    ] = None,
    completion: Annotated[str | None, typer.Option(help="greedy:N for samples without a completion")] = None,
    layers: Annotated[str | None, typer.Option(help="comma-separated layer ids (default: the DFlash layers)")] = None,
    priority: Annotated[int, typer.Option()] = 0,
    now: Annotated[bool, typer.Option("--now", help="run outside any window (admin)")] = False,
    wait: Annotated[bool, typer.Option(help="follow the job with a progress bar until it ends")] = True,
) -> None:
    """Submit a warm job from a JSONL file (one sample per line); it runs in the next downtime window."""
    from client import FeatureClient
    from schemas.featureset import parse_layer

    with FeatureClient(url, token) as client:
        status = client.submit_job(
            jsonl=jsonl.read_bytes(),
            backends=backend or ["auto"],
            completion=completion,
            priority=priority,
            layers=[parse_layer(t) for t in layers.split(",")] if layers else None,
            run_now=now,
        )
        console.print(
            f"job {status.id}: {status.total} items, backends {status.backends}, featureset {status.featureset_id}"
        )
        if not wait:
            return
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            task = progress.add_task("warm", total=status.total)
            while status.state in ("queued", "running"):
                note = " (waiting for a window)" if status.waiting_for_window else ""
                rate = f" {status.tokens_per_s:,.0f} tok/s" if status.tokens_per_s else ""
                progress.update(task, completed=status.done + status.failed, description=f"warm{rate}{note}")
                time.sleep(1.0)
                status = client.job(status.id)
            progress.update(task, completed=status.done + status.failed)
    console.print(
        f"{status.state}: {status.done} stored, {status.failed} failed, {status.tokens:,} tokens"
        + (f", {status.tokens_per_s:,.0f} tok/s" if status.tokens_per_s else "")
    )
    for error in status.errors[:20]:
        console.print(f"  [red]sample {error.index} ({error.backend})[/]: {error.message}")
    if status.error:
        console.print(f"  [red]{status.error}[/]")
    if status.state != "done":
        raise typer.Exit(1)


@app.command()
def jobs(
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    cancel: Annotated[str | None, typer.Option(help="cancel this job id")] = None,
) -> None:
    """List warm jobs (or cancel one)."""
    from client import FeatureClient

    with FeatureClient(url, token) as client:
        if cancel:
            client.cancel_job(cancel)
        listed = client.jobs()
    table = Table("id", "state", "done", "failed", "total", "tokens", "tok/s", "backends", "priority", "created")
    for job in listed:
        table.add_row(
            job.id[:12],
            job.state + (" (waiting)" if job.waiting_for_window else ""),
            str(job.done),
            str(job.failed),
            str(job.total),
            f"{job.tokens:,}",
            f"{job.tokens_per_s:,.0f}" if job.tokens_per_s else "-",
            ",".join(job.backends),
            str(job.priority),
            job.created_at[:19],
        )
    console.print(table)


window_app = typer.Typer(help="Downtime windows: when SGLang lends the GPU", no_args_is_help=True)
app.add_typer(window_app, name="window")


def _print_window(state: WindowState) -> None:
    closes = f", closes {state.closes_at}" if state.closes_at else ""
    where = f" ({state.source}{closes})" if state.open else ""
    console.print(f"window {'OPEN' if state.open else 'closed'}{where}; schedule: {state.schedule or 'none'}")


@window_app.command("status")
def window_status(url: UrlOption = DEFAULT_URL, token: TokenOption = None) -> None:
    from client import FeatureClient

    with FeatureClient(url, token) as client:
        _print_window(client.window())


@window_app.command("open")
def window_open(
    minutes: Annotated[float, typer.Option(min=0.1, help="how long SGLang lends the GPU")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    from client import FeatureClient

    with FeatureClient(url, token) as client:
        _print_window(client.open_window(minutes))


@window_app.command("close")
def window_close(url: UrlOption = DEFAULT_URL, token: TokenOption = None) -> None:
    from client import FeatureClient

    with FeatureClient(url, token) as client:
        _print_window(client.close_window())


@app.command()
def get(
    prompt_hash: str,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option()] = None,
    model_revision: Annotated[str | None, typer.Option()] = None,
    featureset: Annotated[str | None, typer.Option(help="featureset id")] = None,
    content_hash: Annotated[str | None, typer.Option()] = None,
    out: Annotated[Path | None, typer.Option(help="write the verified tensors as a .safetensors file")] = None,
) -> None:
    """Fetch one entry, verify it, print its manifest summary."""
    from client import FeatureClient
    from schemas import wire

    with FeatureClient(url, token) as client:
        features = client.get(
            prompt_hash=prompt_hash,
            backend=backend,
            model_revision=model_revision,
            featureset=featureset,
            content_hash=content_hash,
        )
    m = features.manifest
    console.print(
        f"prompt_hash     {m.prompt_hash}\ncontent_hash    {m.content_hash} (verified)\n"
        f"backend         {m.backend}\nmodel_revision  {m.model_revision}\n"
        f"featureset      {m.featureset_id} layers={list(m.featureset.layers)}\n"
        f"hidden_states   {list(features.hidden_states.shape)} {features.hidden_states.dtype}"
    )
    if out is not None:
        out.write_bytes(wire.encode(features.tensors.values(), {"manifest": m.model_dump_json()}))


@app.command()
def entries(
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1)] = 50,
) -> None:
    """List stored entry versions."""
    from client import FeatureClient

    table = Table("prompt hash", "tokens", "backend", "featureset", "content hash", "created")
    with FeatureClient(url, token) as client:
        for number, m in enumerate(client.entries(backend=backend)):
            if number >= limit:
                break
            table.add_row(
                m.prompt_hash[:16], str(m.num_tokens), m.backend, m.featureset_id, m.content_hash[:23], m.created_at
            )
    console.print(table)


@app.command()
def compare(
    prompt_hash: str,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    a: Annotated[str, typer.Option(help="first backend")] = "fla",
    b: Annotated[str, typer.Option(help="second backend")] = "torch",
    featureset: Annotated[str | None, typer.Option(help="featureset id")] = None,
    extract: Annotated[bool, typer.Option(help="extract a missing side")] = False,
) -> None:
    """Per-layer cosine (mean, min), max |diff| and bitwise-equal fraction of two backends' features."""
    from client import FeatureClient

    with FeatureClient(url, token) as client:
        report = client.compare(prompt_hash=prompt_hash, a=a, b=b, featureset=featureset, extract=extract)
    table = Table(
        "layer",
        "cosine mean",
        "cosine min",
        "max |diff|",
        "bitwise equal",
        title=f"{a} vs {b}: {report.num_tokens} tokens, extracted now: {report.extracted or 'none'}",
    )
    for row in report.layers:
        table.add_row(
            str(row.layer),
            f"{row.cosine_mean:.6f}",
            f"{row.cosine_min:.6f}",
            f"{row.max_abs_diff:.4g}",
            f"{row.bitwise_equal_fraction:.2%}",
        )
    console.print(table)


@app.command()
def audit(
    sample: Annotated[int, typer.Option(min=1, help="how many stored entries to re-extract")] = 20,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    backend: Annotated[str | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Re-extract stored entries and report which reproduce their content hash bit for bit."""
    from client import FeatureClient

    with console.status(f"re-extracting {sample} entries"), FeatureClient(url, token) as client:
        report = client.audit(sample, backend, seed)
    for result in report.results:
        mark = "[green]reproduced[/]" if result.reproduced else f"[red]MISMATCH[/] now {result.reproduced_hash[:23]}"
        console.print(f"{result.prompt_hash[:16]} {result.backend:10} {result.content_hash[:23]} {mark}")
    console.print(
        f"{report.reproduced}/{report.total} reproduced bit for bit"
        + (f"; skipped {report.skipped}: {report.skipped_reason}" if report.skipped else "")
    )
    if report.mismatched:
        raise typer.Exit(1)


@app.command("rebuild-catalog")
def rebuild_catalog(data_dir: Path) -> None:
    """Re-create catalog rows from the manifest documents stored beside the blobs."""
    from service.catalog.sqlite import SqliteCatalog
    from service.library import FeatureLibrary
    from service.settings import Settings
    from service.storage.zarr_local import LocalZarrStore

    settings = Settings(data_dir=data_dir)
    library = FeatureLibrary(LocalZarrStore(data_dir), SqliteCatalog(settings.catalog_path), None)
    console.print(f"{library.rebuild_catalog()} versions re-added")


if __name__ == "__main__":
    app()
