"""What the OpenAPI document says beyond the models: the error envelope per status, binary bodies, and /docs served
from a package's Swagger UI assets (GPU hosts have no internet, so no CDN)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from schemas.errors import ErrorBody

_MEANING = {
    401: "no bearer token, or an unknown one (when the service has tokens configured)",
    403: "the token lacks the scope this route needs",
    404: "no such entry or job",
    409: "ambiguous key, backend not available on this host, or the extraction window is closed",
    413: "request body, sample or response over a configured limit",
    422: "invalid input: the message names the field and the rule",
    500: "a stored entry failed its integrity check, or the service failed unexpectedly",
    502: "SGLang did not answer as the hand-over or a reference completion needed",
    503: "no model on this replica, a read-only replica asked to write, or the store or catalog is unreachable",
    507: "the store's disk is full: nothing of the entry was published",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status it can answer with, all carrying `{"error": {"code", "message"}}`
    (422 and 500 always: any parameter can be invalid, and anything can fail)."""
    return {status: {"model": ErrorBody, "description": _MEANING[status]} for status in sorted({*statuses, 422, 500})}


def binary(description: str, *media_types: str) -> dict[int | str, dict[str, Any]]:
    binary_schema = {"schema": {"type": "string", "format": "binary"}}
    content = {media: binary_schema for media in media_types or ("application/octet-stream",)}
    return {200: {"description": description, "content": content}}


def mount_docs(app: FastAPI) -> None:
    """/docs from the swagger-ui-bundle package's files; create the app with `docs_url=None`."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs/assets", StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )
