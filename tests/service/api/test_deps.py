"""The routes reach the services one way: an `Annotated` alias in service/api/deps.py whose dependency takes the
service from the object graph on the app's state. Each alias gives the one field of `Services` of its type, the very
object the composition root built (an alias typed as one service and wired to another fails here)."""

from __future__ import annotations

from typing import Annotated, get_args, get_origin, get_type_hints

from fastapi import FastAPI
from starlette.requests import Request

from service.api import deps
from service.services import Services


def test_every_alias_gives_the_one_service_of_its_type_from_the_object_graph(app: FastAPI) -> None:
    aliases = {name: value for name, value in vars(deps).items() if get_origin(value) is Annotated}
    assert {name for name in aliases if name.endswith("Dep")} == set(aliases) and len(aliases) >= 12
    fields = get_type_hints(Services)
    request = Request({"type": "http", "app": app})
    for name, alias in aliases.items():
        service_type, depends = get_args(alias)
        typed = [field for field, hint in fields.items() if hint == service_type]
        assert len(typed) == 1, (name, typed)
        assert depends.dependency(request) is getattr(app.state.services, typed[0]), name
