"""What the OpenAPI document says beyond the models: the error envelope per status, binary bodies, and /docs served
from a package's Swagger UI assets (GPU hosts have no internet, so no CDN)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from schemas.errors import ErrorBody

_ENVELOPE = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}

_MEANING = {
    400: "a body that cannot be read in its encoding",
    401: "no bearer token, or an unknown one (when the service has tokens configured)",
    403: "the token lacks the scope this route needs",
    404: "no such entry or job",
    409: (
        "ambiguous key, backend or model revision not available on this host, the extraction window is closed, or "
        "a dataset name taken"
    ),
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


def json_body(model: type[BaseModel], description: str) -> dict[str, Any]:
    """`openapi_extra=` for a route that reads its body itself: the model it must be, required."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)  # the models it names are in the document's components already (other routes use them)
    content = {"application/json": {"schema": schema}}
    return {"requestBody": {"required": True, "description": description, "content": content}}


def binary_body(description: str, media_type: str) -> dict[str, Any]:
    content = {media_type: {"schema": {"type": "string", "format": "binary"}}}
    return {"requestBody": {"required": True, "description": description, "content": content}}


def document_app(app: FastAPI, vocab_size: int | None, num_layers: int | None, margin_s: float) -> None:
    """What this app's document says beyond its models, so it says what its validation does: every operation with a
    body may answer 400 (a body that is not text in its encoding; JSON that does not parse is a 422); token ids stop
    below the model's vocabulary and layer indices below its layer count; a window is longer than the margin kept to
    hand the GPU back."""
    build = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()  # FastAPI's own, which keeps it as app.openapi_schema: amended once, in place
        for operations in schema["paths"].values():
            for operation in operations.values():
                if "requestBody" in operation:
                    operation["responses"].setdefault("400", {"description": _MEANING[400], "content": _ENVELOPE})
        if vocab_size is not None:
            _cap_integers(schema, "token_ids", vocab_size - 1)
        if num_layers is not None:
            _cap_integers(schema, "layers", num_layers - 1)
        minutes = schema["components"]["schemas"]["WindowOpenRequest"]["properties"]["minutes"]
        minutes["exclusiveMinimum"] = max(minutes.get("exclusiveMinimum", 0), margin_s / 60)
        return schema

    app.openapi = document  # type: ignore[method-assign]  # FastAPI's documented way to amend an app's schema


def _cap_integers(node: Any, under: str, maximum: int, inside: bool = False) -> None:
    """Every integer under an `under` property (a sample's `token_ids`, a featureset's `layers`) at most
    `maximum`."""
    if isinstance(node, dict):
        if inside and node.get("type") == "integer":
            node["maximum"] = maximum
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for name, schema in value.items():
                    _cap_integers(schema, under, maximum, inside or name == under)
            else:
                _cap_integers(value, under, maximum, inside)
    elif isinstance(node, list):
        for value in node:
            _cap_integers(value, under, maximum, inside)


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
