"""The status page: `GET /status` and its assets under `/status/assets/`, every file from this package (no build step,
nothing fetched from elsewhere: it works on a host with no internet). The page holds no data; its script reads the
API with the token the user gives it, so the service's tokens protect the page's data as they protect the API. The
page itself says only whether a token is wanted, this service's version and the backends a comparison can name."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from schemas.backend import STORED_BACKENDS

ASSETS = Path(__file__).with_name("status")


def mount_status_page(app: FastAPI, version: str, tokens_required: bool) -> None:
    app.mount("/status/assets", StaticFiles(directory=str(ASSETS)), name="status-assets")
    page = (
        (ASSETS / "index.html")
        .read_text()
        .replace("{{auth}}", "required" if tokens_required else "none")
        .replace("{{version}}", version)
        .replace("{{backends}}", ",".join(STORED_BACKENDS))
    )

    @app.get("/status", include_in_schema=False)
    def status() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})
