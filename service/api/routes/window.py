from __future__ import annotations

from schemas.job_api import WindowOpenRequest, WindowState
from service.api.bounded_json import resource_router
from service.api.deps import AdminScope, ModelsDep, ReadScope, WindowsDep
from service.api.openapi import errors
from service.errors import InvalidRequest
from service.extraction.extractor import Extractor
from service.model.manager import ModelManager

router = resource_router("window")


def _with_gpu(state: WindowState, models: ModelManager[Extractor] | None) -> WindowState:
    if models is None:
        return state
    return state.model_copy(update={"gpu_held": models.loaded, "sglang_canary": models.sglang_canary})


@router.get(
    "/v1/window",
    dependencies=[ReadScope],
    summary="Is the extraction window open, and until when",
    responses=errors(401, 403),
)
def window_state(windows: WindowsDep, models: ModelsDep) -> WindowState:
    return _with_gpu(windows.state(), models)


@router.post(
    "/v1/window/open",
    dependencies=[AdminScope],
    summary="Open a manual window for N minutes",
    responses=errors(401, 403, 422),
)
def open_window(body: WindowOpenRequest, windows: WindowsDep, models: ModelsDep) -> WindowState:
    try:
        return _with_gpu(windows.open(body.minutes), models)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


@router.post(
    "/v1/window/close",
    dependencies=[AdminScope],
    summary="Close the window now (a scheduled one stays shut until its end)",
    responses=errors(401, 403),
)
def close_window(windows: WindowsDep, models: ModelsDep) -> WindowState:
    return _with_gpu(windows.close(), models)
