"""The README's demo: start the service on the tiny model (CPU), extract the ten coding prompts, fetch each one
back verified, and print a table. A second run finds everything stored and prints the same content hashes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from client import FeatureClient
from hsstore.demo_prompts import PROMPTS

HOME = Path(os.environ.get("HSSTORE_DEMO_DIR", ".demo"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("the service did not become ready")


def main() -> None:
    console = Console(width=120)
    model_dir, data_dir = HOME / "model", HOME / "data"
    if not (model_dir / "config.json").exists():
        from service.model.devmodel import build_devmodel

        console.print(f"building the tiny Qwen3.5 model in {model_dir}")
        build_devmodel(model_dir)
    prompts = HOME / "prompts.jsonl"  # the same ten samples as a file, for trying the CLI by hand afterwards
    prompts.write_text("".join(json.dumps(sample) + "\n" for sample in PROMPTS))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # As on a shared GPU host: SGLang has the GPU outside a nightly window, so extraction waits for a window.
    env = {
        **os.environ,
        "HSSTORE_MODEL_DIR": str(model_dir),
        "HSSTORE_DATA_DIR": str(data_dir),
        "HSSTORE_DEVICE": "cpu",
        "HSSTORE_PORT": str(port),
        "HSSTORE_HOST": "127.0.0.1",
        "HSSTORE_WINDOWS": '["Sat 03:00-04:00 UTC"]',
        "HSSTORE_WINDOW_MARGIN_S": "10",
    }
    console.print(f"starting hsstore on {url} (model {model_dir}, store {data_dir})")
    # the service's startup lines (stderr) show; its per-request access log (stdout) would bury the table
    server = subprocess.Popen([sys.executable, "-m", "hsstore.cli", "serve"], env=env, stdout=subprocess.DEVNULL)
    try:
        _wait_ready(url, server)
        with FeatureClient(url) as client:
            info = client.info()
            assert info.model is not None
            layers = info.default_featureset.layers if info.default_featureset else "-"
            console.print(
                f"model_revision {info.model.model_revision}\nbackends {info.backends_available}, "
                f"default layers {layers}; window open: {client.window().open}"
            )
            state = client.open_window(2)  # what `hsstore window open --minutes 2` does
            console.print(f"opened a manual window until {state.closes_at}; submitting the warm job")
            started = time.perf_counter()
            job = client.submit_job(PROMPTS)
            while job.state.active:
                time.sleep(0.2)
                job = client.job(job.id)
            elapsed = time.perf_counter() - started
            client.close_window()
            table = Table(
                title=f"warm job {job.state}: {job.done} entries, {job.tokens} tokens extracted now "
                f"({elapsed:.2f} s); every fetch verified against its content hash"
            )
            for column in ("id", "prompt hash", "tokens", "backend", "content hash"):
                table.add_column(column)
            # the job's own entries, named in full: whatever else a user stored since for these prompts (a second
            # featureset, another backend, imports) leaves them one entry each
            revision, backend = info.model.model_revision, info.default_backend
            for sample in PROMPTS:  # each fetch verified on receipt
                features = client.get(sample, model_revision=revision, backend=backend, featureset=job.featureset_id)
                m = features.manifest
                table.add_row(str(sample["id"]), m.prompt_hash[:16], str(m.num_tokens), m.backend, m.content_hash[:23])
        console.print(table)
        console.print(f"the ten samples are in {prompts}; README's 'Try it by hand' serves this store again")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
