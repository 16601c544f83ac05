"""The verbs that run hsstore rather than talk to it: `serve` (the service), `worker` (the warm-job queue on one
GPU, no HTTP) and `devmodel` (the tiny test model). Each imports torch and the service only once its arguments are
checked."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer


def serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file (or HSSTORE_CONFIG)")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="model directory (overrides settings)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="store directory (overrides settings)")] = None,
    host: Annotated[
        str | None, typer.Option(help="address to listen on (overrides settings; default 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on (overrides settings; default 8000)")] = None,
    device: Annotated[
        str | None, typer.Option(help="where the model runs: cpu, cuda, cuda:N or auto (overrides settings)")
    ] = None,
    processes: Annotated[
        int,
        typer.Option(
            min=1,
            help="HTTP processes serving the store (a service without a model only: a read replica for training "
            "nodes, beside the one that owns the GPU)",
        ),
    ] = 1,
) -> None:
    """Run the service: load the model (now, or when a window opens) and serve the store. Logs every request."""
    from hsstore.cli.errors import CliError
    from service.config_file import CONFIG_ENV
    from service.settings import Settings

    overrides = {
        k: v
        for k, v in {"model_dir": model_dir, "data_dir": data_dir, "host": host, "port": port, "device": device}.items()
        if v is not None
    }
    settings = Settings.load(config, **overrides)
    if processes > 1 and settings.model_dir is not None:
        raise CliError(
            f"--processes {processes}: only a service without a model runs as several processes (each would load it)",
            "serve reads from a replica beside this one: hsstore serve --data-dir D --port P --processes N",
        )
    _check_port_free(settings.host, settings.port)  # before the heavy imports, the model, and "listening"
    import uvicorn

    from service.api.connections import HEADER_TIMEOUT_ENV, PROTOCOL
    from service.main import create_app

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    # the protocol is built by name in every serving process: its deadline goes through the environment
    os.environ[HEADER_TIMEOUT_ENV] = str(settings.header_timeout_s)
    if processes == 1:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level="info",
            access_log=True,
            http=PROTOCOL,
            timeout_keep_alive=settings.keep_alive_s,
        )
        return
    # each process builds its own app from the same settings: the command line's reach it through the environment
    os.environ.update({f"HSSTORE_{k.upper()}": str(v) for k, v in overrides.items()})
    if config is not None:
        os.environ[CONFIG_ENV] = str(config)
    uvicorn.run(
        "service.main:create_app",
        factory=True,
        workers=processes,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,  # N processes' request lines interleaved say less than the metrics do
        http=PROTOCOL,
        timeout_keep_alive=settings.keep_alive_s,
    )


def _check_port_free(host: str, port: int) -> None:
    import socket

    from hsstore.cli.errors import CliError

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: only a listener is in the way
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CliError(
                f"cannot listen on {host}:{port}: {exc.strerror}",
                "is another `hsstore serve` running there? pick another with --port (or HSSTORE_PORT)",
            ) from None


WORKER_HEARTBEAT = "worker.alive"  # under the worker's data directory; deploy/'s health checks read its age


def worker(
    device: Annotated[
        str | None, typer.Option(help="the GPU this worker owns: cuda:0, cuda:1, … (or cpu); default HSSTORE_DEVICE")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML settings file (or HSSTORE_CONFIG)")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="model directory (overrides settings)")] = None,
) -> None:
    """Run the warm-job queue on one GPU, with no HTTP server: start one per GPU, on any host that reaches the
    catalog and the store. Items are claimed under a lease renewed by a heartbeat; a dead worker's items go to the
    others once its lease runs out. Windows and the SGLang hand-over are this host's own settings."""
    import signal
    import socket
    import threading

    from service.main import build_services
    from service.metrics.worker import serve_worker
    from service.settings import Settings

    overrides: dict[str, object] = {"run_jobs": True}
    if device is not None:  # else the settings' (HSSTORE_DEVICE, the TOML file, then "auto")
        overrides["device"] = device
    if model_dir is not None:
        overrides["model_dir"] = model_dir
    settings = Settings.load(config, **overrides)
    if settings.model_dir is None:
        raise typer.BadParameter("a worker needs a model: --model-dir or HSSTORE_MODEL_DIR")
    if settings.worker_name is None:
        settings = settings.model_copy(update={"worker_name": f"{socket.gethostname()}:{settings.device}"})
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    services = build_services(settings)
    assert services.runner is not None and services.models is not None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    alive = settings.data_dir / WORKER_HEARTBEAT
    alive.parent.mkdir(parents=True, exist_ok=True)
    if settings.metrics_port is not None:
        serve_worker(
            services.metrics, services.windows, services.models, services.memory, settings.host, settings.metrics_port
        )
    with services.running():
        typer.echo(
            f"hsstore worker {settings.worker_name} on {settings.device}: model {settings.model_dir}, "
            f"lease {settings.lease_s:g} s, held as {services.runner.worker}"
        )
        # the health check's evidence: touched while the job loop and the lease heartbeat both run
        while services.runner.alive:
            alive.touch()
            if stop.wait(min(10.0, settings.lease_s / 3)):
                break
    typer.echo(f"hsstore worker {settings.worker_name} stopped; its unfinished items are free for the others")


def devmodel(
    out_dir: Path,
    multimodal: Annotated[bool, typer.Option(help="write the Qwen3_5ForConditionalGeneration layout")] = False,
    head_dim: Annotated[int, typer.Option(help="16: the 64-wide CPU model; 64: a 256-wide one for GPU kernels")] = 16,
    fp8: Annotated[
        bool, typer.Option(help="quantized as Qwen's -FP8 releases are (e4m3 weights, 128x128 block scales)")
    ] = False,
) -> None:
    """Write the tiny Qwen3.5 test model (random weights from a fixed seed, tokenizer trained here)."""
    import tempfile

    from schemas.model_revision import model_revision
    from service.model.devmodel import build_devmodel
    from service.model.fp8_weights import write_fp8_checkpoint

    if not fp8:
        build_devmodel(out_dir, multimodal=multimodal, head_dim=head_dim)
    else:
        with tempfile.TemporaryDirectory() as bf16:
            write_fp8_checkpoint(build_devmodel(Path(bf16), multimodal=multimodal, head_dim=head_dim), out_dir)
    typer.echo(f"{out_dir}  model_revision={model_revision(out_dir)}")
