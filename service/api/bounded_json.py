"""Every JSON body the API parses, parsed by one bounded loader (schemas/json_limits.py) before pydantic or our
code sees it: a body nested past `BODY_DEPTH` levels, or holding a number Python will not convert, is a 422 naming
the limit instead of a recursion error somewhere below."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from schemas.json_limits import JsonLimitError, load_json


class BoundedJsonRequest(Request):
    """A request whose `json()` (what FastAPI calls for a JSON body) is `load_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = load_json(await self.body())
            except JsonLimitError as exc:  # FastAPI passes an HTTPException on; anything else would become a 400
                raise HTTPException(422, str(exc)) from None
        return self._json


class BoundedJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            return await handler(BoundedJsonRequest(request.scope, request.receive))

        return bounded


def resource_router(tag: str) -> APIRouter:
    """The router of one resource: its routes parse JSON bodies with `load_json`."""
    return APIRouter(tags=[tag], route_class=BoundedJsonRoute)
