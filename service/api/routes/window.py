from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from schemas.api import WindowState
from service.api.deps import AdminScope, ReadScope, WindowsDep
from service.errors import InvalidRequest

router = APIRouter(tags=["window"])


class OpenWindow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    minutes: float = Field(gt=0, le=24 * 60)


@router.get("/v1/window", dependencies=[ReadScope])
def window_state(windows: WindowsDep) -> WindowState:
    return windows.state()


@router.post("/v1/window/open", dependencies=[AdminScope])
def open_window(body: OpenWindow, windows: WindowsDep) -> WindowState:
    try:
        return windows.open(body.minutes)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


@router.post("/v1/window/close", dependencies=[AdminScope])
def close_window(windows: WindowsDep) -> WindowState:
    return windows.close()
