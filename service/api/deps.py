"""Dependency providers and their `Annotated` aliases: a route's signature says what it needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from service.errors import Forbidden, Unauthorized
from service.jobs.queue import JobQueue
from service.library import FeatureLibrary
from service.settings import Settings
from service.windows import Windows


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_library(request: Request) -> FeatureLibrary:
    return request.app.state.library


def get_jobs(request: Request) -> JobQueue:
    return request.app.state.jobs


def get_windows(request: Request) -> Windows:
    windows = request.app.state.library.windows
    assert windows is not None
    return windows


SettingsDep = Annotated[Settings, Depends(get_settings)]
LibraryDep = Annotated[FeatureLibrary, Depends(get_library)]
JobsDep = Annotated[JobQueue, Depends(get_jobs)]
WindowsDep = Annotated[Windows, Depends(get_windows)]


def Scope(scope: str) -> Callable[[Request, Settings], None]:
    """Require a bearer token with `scope` (admin implies every scope) when the service has tokens configured."""

    def check(request: Request, settings: SettingsDep) -> None:
        if not settings.tokens:
            return
        header = request.headers.get("authorization", "")
        kind, _, token = header.partition(" ")
        if kind.lower() != "bearer" or not token:
            raise Unauthorized("a bearer token is required")
        scopes = settings.tokens.get(token.strip())
        if scopes is None:
            raise Unauthorized("unknown bearer token")
        if scope not in scopes and "admin" not in scopes:
            raise Forbidden(f"this token lacks the {scope!r} scope")

    return check


ReadScope = Depends(Scope("read"))
WriteScope = Depends(Scope("write"))
AdminScope = Depends(Scope("admin"))
