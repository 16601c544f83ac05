"""The lines an operator reads when the service starts."""

from __future__ import annotations

from service import __version__
from service.core.gpu_time.windows import Windows
from service.errors import HsstoreError
from service.model.manager import ModelManager
from service.settings import Settings
from service.storage.protocol import Blobs


def startup_lines(settings: Settings, models: ModelManager | None, store: Blobs, windows: Windows) -> list[str]:
    """What an operator needs to see when the service starts: where, which model, what it can run, where it
    keeps data, whether anyone can call it."""
    lines = [f"hsstore {__version__} listening on http://{settings.host}:{settings.port} (API docs at /docs)"]
    if models is None:
        lines.append("model: none: serves stored features and takes imports; extraction is refused")
    else:
        spec = models.spec
        if models.loaded:
            when = "loaded"
        elif not models.loads_weights:
            when = "config and tokenizer only: submissions are tokenised here, the cluster's workers extract"
        elif windows.enforced:
            when = "loaded when a window opens (SGLang has the GPU until then)"
        else:
            when = "loaded at the first extraction"
        lines.append(f"model: {spec.path} ({spec.info().architecture}, {spec.num_layers} layers), {when}")
        lines.append(f"model_revision: {spec.revision}")
        try:
            default = spec.resolve_backend(settings.default_backend).value
        except HsstoreError as exc:
            default = f"{settings.default_backend}, which this host cannot run: {exc.message}"
        lines.append(f"backends this host can run: {', '.join(spec.available_backends())} (default {default})")
    access = " (read-only: serves, writes nothing)" if store.read_only else ""
    lines.append(f"data dir: {settings.data_dir.resolve()}{access}")
    if settings.store_url is not None:
        lines.append(f"blobs: {settings.store_url}" + (f" at {settings.s3_endpoint}" if settings.s3_endpoint else ""))
    if settings.catalog_url is not None:
        from service.catalog.postgres.database import masked

        lines.append(f"catalog: Postgres at {masked(settings.catalog_url)}")
    if settings.tokens:
        lines.append(f"auth: on ({len(settings.tokens)} bearer tokens)")
    else:
        can = "read" if store.read_only else "read and write"
        meant = ", allow_anonymous" if settings.allow_anonymous else ""
        lines.append(f"auth: off (no tokens configured{meant}: whoever reaches this port can {can})")
    if models is not None and not models.loads_weights:
        lines.append("extraction: by `hsstore worker` processes (run_jobs=false: this replica loads no weights)")
    elif windows.enforced:
        schedule = "; ".join(settings.windows) or "manual only"
        lines.append(f"extraction windows: {schedule}; hand-over: {settings.handover}")
    else:
        lines.append("extraction windows: none (the GPU is always this service's)")
    return lines
