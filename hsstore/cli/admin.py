"""`hsstore rebuild-catalog`, `migrate` and `verify`: admin verbs on a store, run where its files are."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from service.settings import Settings


# What an admin verb reads, and how to tell a store holds it (the catalog and the blobs may instead be at
# HSSTORE_CATALOG_URL / HSSTORE_STORE_URL)
_STORE_HOLDS = {
    "catalog.sqlite": lambda s: s.catalog_url is not None or s.catalog_path.exists(),
    "manifests/": lambda s: s.store_url is not None or (s.data_dir / "manifests").is_dir(),
}


def _store_settings(data_dir: Path, needs: str) -> Settings:
    """Settings for an admin verb on an existing store: a directory without one is an error, never a new empty
    store reported as checked."""
    from hsstore.cli.errors import CliError
    from service.settings import Settings

    settings = Settings.load(data_dir=data_dir, model_dir=None)
    if not _STORE_HOLDS[needs](settings):
        raise CliError(
            f"{data_dir} holds no hsstore store (no {needs} there)",
            "name the data directory `hsstore serve` uses (HSSTORE_DATA_DIR)",
        )
    return settings


def rebuild_catalog(data_dir: Path) -> None:
    """Re-create catalog rows from the manifest documents stored beside the blobs."""
    settings = _store_settings(data_dir, "manifests/")  # refused before the heavy imports
    from service.main import build_store_admin

    services = build_store_admin(settings)
    try:
        report = services.rebuilder.rebuild()
    finally:
        services.close()
    for name, why in report.rejected:
        typer.echo(f"skipped {name[:16]}: {why}", err=True)
    typer.echo(f"{report.added} versions re-added, {report.present} already there, {len(report.rejected)} skipped")
    if report.rejected:
        raise typer.Exit(1)


def migrate(
    config: Annotated[Path | None, typer.Option(help="TOML settings file (or HSSTORE_CONFIG)")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="the store's directory, whose catalog.sqlite this is (overrides settings)")
    ] = None,
    check: Annotated[
        bool, typer.Option(help="only report; exit 1 if a step is pending or the schema is newer")
    ] = False,
) -> None:
    """Bring the catalog's schema (HSSTORE_CATALOG_URL, or catalog.sqlite under the data directory) to this hsstore's
    version. Every process also migrates at start, once, under a lock; a process older than the schema refuses to
    start, so upgrade a cluster by migrating first, then restarting workers and replicas on the new version."""
    from service.registry import build_catalog, catalog_location, catalog_schema
    from service.settings import Settings

    settings = Settings.load(config, model_dir=None, **({"data_dir": data_dir} if data_dir is not None else {}))
    where = catalog_location(settings)
    parts = catalog_schema(settings)
    if not check and (parts is None or any(p.state == "behind" for p in parts)):
        build_catalog(settings, read_only=False)[0].close()  # opening it applies the missing steps
        parts = catalog_schema(settings)
    if parts is None:
        typer.echo(f"no catalog yet at {where}: the first process to start (or `hsstore migrate`) creates it")
        raise typer.Exit(1 if check else 0)
    typer.echo(f"catalog {where}")
    for part in parts:
        typer.echo(f"{part.part:9} {part.have} of {part.steps} steps  {part.state}")
    if any(p.state == "newer" for p in parts):
        typer.echo("the catalog was migrated by a newer hsstore than this one: upgrade this one", err=True)
    if any(p.state != "current" for p in parts):
        raise typer.Exit(1)


def verify(
    data_dir: Annotated[
        Path,
        typer.Argument(
            help="the store's directory; with HSSTORE_STORE_URL / HSSTORE_CATALOG_URL set, the bucket and the "
            "Postgres catalog they name are scrubbed instead"
        ),
    ],
    sample: Annotated[int | None, typer.Option(min=1, help="check this many versions at random, not all")] = None,
    restart: Annotated[bool, typer.Option(help="start over rather than resume where the last scrub stopped")] = False,
    seed: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Scrub the store: read every version's bytes and check them against what was written (chunk digests, content
    hash); corrupt ones are marked in the catalog and never served as valid. Resumes an interrupted scrub."""
    settings = _store_settings(data_dir, "catalog.sqlite")  # refused before the heavy imports
    from hsstore.cli.options import console, progress_bar
    from service.main import build_store_admin

    services = build_store_admin(settings)
    try:
        with progress_bar() as bar:
            task = bar.add_task("verify", total=None)
            report = services.verifier.scrub(
                sample, restart, seed, on_checked=lambda done, total: bar.update(task, completed=done, total=total)
            )
    finally:
        services.close()
    for bad in report.corrupt:
        typer.echo(f"CORRUPT {bad.prompt_hash[:12]}  {bad.backend:10}  {bad.content_hash[:23]}  {bad.detail}")
    resumed = f" (resumed after catalog position {report.resumed_after})" if report.resumed_after else ""
    console.print(f"{report.checked} versions checked{resumed}: {report.intact} intact, {len(report.corrupt)} corrupt")
    if report.corrupt:
        raise typer.Exit(1)
