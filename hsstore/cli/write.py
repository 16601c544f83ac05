"""`hsstore extract` and `hsstore warm`: samples from a JSONL file, every line checked before anything is sent."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated

import typer

from hsstore.cli import output as out
from hsstore.cli.errors import CliError
from hsstore.cli.inputs import SampleFile, featureset_named, featureset_option
from hsstore.cli.options import (
    INTERRUPTED,
    DtypeOption,
    FeaturesetForLayersOption,
    JsonOption,
    LayersOption,
    SamplesArgument,
    TargetIdsOption,
    TopKOption,
    client_of,
    console,
    progress_bar,
    stoppable,
)
from schemas.backend import backends_help
from schemas.timestamps import utc_now

if TYPE_CHECKING:
    from schemas.api import ExtractResult
    from schemas.job_api import JobStatus


def extract(
    ctx: typer.Context,
    jsonl: SamplesArgument,
    backend: Annotated[str | None, typer.Option(help=backends_help(with_auto=True))] = None,
    layers: LayersOption = None,
    dtype: DtypeOption = "bfloat16",
    target_ids: TargetIdsOption = False,
    top_k: TopKOption = None,
    featureset: FeaturesetForLayersOption = None,
    batch: Annotated[int, typer.Option(min=1, help="samples per request")] = 8,
    as_json: JsonOption = False,
) -> None:
    """Extract (or find stored) features for every sample of a JSONL file now; prints each sample's prompt hash."""
    samples = SampleFile(jsonl)
    chosen = featureset_option(layers, dtype, target_ids, top_k) if featureset is None else None
    counts = {"extracted": 0, "existing": 0}
    started = utc_now()
    in_flight = 0  # samples of a request sent and not yet answered
    try:
        with stoppable(), client_of(ctx) as client, progress_bar() as progress:
            if featureset is not None:
                chosen = featureset_named(client, featureset, layers)
            task = progress.add_task("extract", total=len(samples.samples))
            for start in range(0, len(samples.samples), batch):
                in_flight = min(batch, len(samples.samples) - start)
                try:
                    response = client.extract(
                        samples.samples[start : start + batch], featureset=chosen, backend=backend
                    )
                    in_flight = 0
                except Exception as exc:
                    _stopped_after(exc, samples, start, counts)
                    raise
                if start == 0 and not as_json and response.results:
                    m = response.results[0].manifest
                    layer_list = ",".join(map(str, m.featureset.layers))
                    typer.echo(f"featureset {m.featureset_id} (layers {layer_list}), backend {m.backend}")
                for offset, result in enumerate(response.results):
                    _print_result(result, samples, start + offset, as_json)
                counts["extracted"] += response.extracted
                counts["existing"] += response.existing
                progress.advance(task, len(response.results))
    except KeyboardInterrupt:
        stored = counts["extracted"] + counts["existing"]
        to_line = f" (to line {samples.lines[stored - 1]})" if stored else ""
        held = (
            f"; the service finishes the request it holds ({in_flight} more samples) and stores them too"
            if in_flight
            else ""
        )
        console.print(
            f"interrupted: {stored} of {len(samples.samples)} samples stored{to_line}{held}\n"
            f"  list what is stored: hsstore entries --since {started}; running the command again skips it"
        )
        raise typer.Exit(INTERRUPTED) from None
    console.print(f"{counts['extracted']} extracted, {counts['existing']} already stored")


def _print_result(result: ExtractResult, samples: SampleFile, index: int, as_json: bool) -> None:
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


def estimate(
    ctx: typer.Context,
    jsonl: SamplesArgument,
    backend: Annotated[
        list[str] | None, typer.Option(help="backends to extract for (repeatable); default auto")
    ] = None,
    layers: LayersOption = None,
    dtype: DtypeOption = "bfloat16",
    target_ids: TargetIdsOption = False,
    top_k: TopKOption = None,
    tokens_per_s: Annotated[
        float | None, typer.Option(help="the GPU's rate, if this service has none recorded")
    ] = None,
    recipe: Annotated[
        list[str] | None,
        typer.Option(help="instead of --layers, a recipe's layers (repeatable): their union beside each on its own"),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """What extracting a JSONL file would take, before anything runs: tokens, bytes stored, GPU-hours."""
    samples = SampleFile(jsonl)
    if recipe and layers:
        raise CliError("give --layers or --recipe, not both")
    recipes = [featureset_option(r, dtype, target_ids, top_k) for r in recipe or []]
    with client_of(ctx) as client:
        report = client.estimate(
            samples.samples,
            None if recipes else featureset_option(layers, dtype, target_ids, top_k),
            backend or ["auto"],
            tokens_per_s=tokens_per_s,
            recipes=[r for r in recipes if r is not None] or None,
        )
    if as_json:
        typer.echo(report.model_dump_json())
        return
    hours = f"{report.gpu_hours:,.2f}" if report.gpu_hours is not None else "unknown"
    rate = f"{report.tokens_per_s:,.0f} tok/s" if report.tokens_per_s is not None else "no rate"
    rows = [
        ("samples", f"{report.samples:,}", ""),
        ("tokens (per backend)", f"{report.tokens:,}", f"backends {', '.join(report.backends)}"),
        ("raw bytes", _size(report.raw_bytes), f"{report.bytes_per_token:,} B per token, {report.dtype}"),
        ("compression", f"{report.compression_ratio:.3f}x", report.compression_ratio_source),
        (
            "stored bytes",
            _size(report.stored_bytes),
            f"{'the union: ' if report.recipes else ''}featureset {report.featureset_id}",
        ),
        ("GPU-hours", hours, f"{rate} ({report.tokens_per_s_source})"),
    ]
    if report.recipes:  # the union above is extracted once; each recipe on its own is another extraction
        for cost in report.recipes:
            rows.append((f"recipe {cost.featureset_id}", _size(cost.stored_bytes), f"layers {cost.layers}"))
        alone = sum(cost.stored_bytes for cost in report.recipes)
        times = len(report.recipes)
        hours_alone = f"{times * report.gpu_hours:,.2f} GPU-hours" if report.gpu_hours is not None else "GPU-hours"
        rows.append(("recipes one by one", _size(alone), f"{times} extractions: {hours_alone}"))
    out.table(("", "ESTIMATE", "FROM"), rows, frozenset({1}))


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    return str(n)


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


def warm(
    ctx: typer.Context,
    jsonl: SamplesArgument,
    backend: Annotated[
        list[str] | None, typer.Option(help=f"{backends_help(with_auto=True)}; repeat for several")
    ] = None,
    completion: Annotated[str | None, typer.Option(help="greedy:N for samples without a completion")] = None,
    layers: LayersOption = None,
    dtype: DtypeOption = "bfloat16",
    target_ids: TargetIdsOption = False,
    top_k: TopKOption = None,
    featureset: FeaturesetForLayersOption = None,
    priority: Annotated[int, typer.Option()] = 0,
    now: Annotated[bool, typer.Option("--now", help="run outside any window (admin)")] = False,
    wait: Annotated[bool, typer.Option(help="follow the job with a progress bar until it ends")] = True,
) -> None:
    """Submit a warm job from a JSONL file (one sample per line); it runs in the next downtime window."""
    from client import HsstoreError

    samples = SampleFile(jsonl)
    chosen = featureset_option(layers, dtype, target_ids, top_k) if featureset is None else None
    status: JobStatus | None = None
    # Ctrl-C (or SIGTERM) from here on says what goes on in the service, however early it comes
    try:
        with stoppable(), client_of(ctx) as client:
            if featureset is not None:
                chosen = featureset_named(client, featureset, layers)
            try:
                status = client.submit_job(
                    jsonl=jsonl.read_bytes(),
                    backends=backend or ["auto"],
                    completion=completion,
                    priority=priority,
                    featureset=chosen,
                    run_now=now,
                )
            except HsstoreError as exc:
                exc.message = samples.locate(exc.message)
                raise
            typer.echo(
                f"job {status.id}: {status.total} items ({len(samples.samples)} samples x "
                f"{', '.join(status.backends)}), featureset {status.featureset_id}"
            )
            if not wait:
                return
            with progress_bar() as progress:
                task = progress.add_task("warm", total=status.total)
                while True:
                    note = " (waiting for a window)" if status.waiting_for_window else ""
                    rate = f" {status.tokens_per_s:,.0f} tok/s" if status.tokens_per_s else ""
                    progress.update(task, completed=status.done + status.failed, description=f"warm{rate}{note}")
                    if not status.state.active:
                        break  # the last frame shows the finished count
                    time.sleep(1.0)
                    status = client.job(status.id)
    except KeyboardInterrupt:
        if status is None:
            console.print("interrupted before the service answered: it may have made the job anyway (hsstore jobs)")
        else:
            console.print(
                f"stopped following job {status.id}: it goes on in the service ({status.done + status.failed}/"
                f"{status.total} done so far)\n  follow it: hsstore jobs {status.id}; stop it: hsstore jobs "
                f"cancel {status.id}"
            )
        raise typer.Exit(INTERRUPTED) from None
    took = f" in {status.elapsed_s:,.1f} s" if status.elapsed_s is not None else ""
    rate = f", {status.tokens_per_s:,.0f} tok/s" if status.tokens_per_s else ""
    if status.tokens_per_worker_s and status.tokens_per_s and status.tokens_per_worker_s < 0.95 * status.tokens_per_s:
        rate += f" ({status.tokens_per_worker_s:,.0f} per worker)"  # several workers shared it
    new = status.done - status.existing
    typer.echo(
        f"{status.state}: {new} new, {status.existing} already stored, {status.failed} failed, "
        f"{status.tokens:,} tokens extracted{took}{rate}"
    )
    for error in status.errors[:20]:
        typer.echo(f"  {samples.where(error.index)} ({error.backend}): {error.message}")
    if status.error:
        typer.echo(f"  {status.error}")
    if status.state != "done":
        raise typer.Exit(1)
