from __future__ import annotations

from fastapi import APIRouter

from schemas.api import WindowOpenRequest, WindowState
from service.api.deps import AdminScope, ReadScope, WindowsDep
from service.api.openapi import errors
from service.errors import InvalidRequest

router = APIRouter(tags=["window"])


@router.get(
    "/v1/window",
    dependencies=[ReadScope],
    summary="Is the extraction window open, and until when",
    responses=errors(401, 403),
)
def window_state(windows: WindowsDep) -> WindowState:
    return windows.state()


@router.post(
    "/v1/window/open",
    dependencies=[AdminScope],
    summary="Open a manual window for N minutes",
    responses=errors(401, 403, 422),
)
def open_window(body: WindowOpenRequest, windows: WindowsDep) -> WindowState:
    try:
        return windows.open(body.minutes)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


@router.post(
    "/v1/window/close",
    dependencies=[AdminScope],
    summary="Close the window now (a scheduled one stays shut until its end)",
    responses=errors(401, 403),
)
def close_window(windows: WindowsDep) -> WindowState:
    return windows.close()
