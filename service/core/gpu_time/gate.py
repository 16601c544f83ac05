"""Whether extraction may run here, now: a model must be configured (a replica without one serves stored features
only), and, unless an admin runs a job now, the GPU's downtime window must be open. The gate answers that one
question; each service is handed the model (or its spec) and the windows it needs by the composition root."""

from __future__ import annotations

from typing import TypeVar

from service.core.gpu_time.windows import Windows
from service.errors import ModelUnavailable, WindowClosed
from service.extraction.extractor import Extractor
from service.model.manager import ModelManager

T = TypeVar("T")


def configured(part: T | None) -> T:
    """A part of the configured model (its manager, its spec), or ModelUnavailable where none is configured."""
    if part is None:
        raise ModelUnavailable("this replica has no model configured: it serves stored features only")
    return part


class ExtractionGate:
    def __init__(self, models: ModelManager[Extractor] | None, windows: Windows) -> None:
        self._models = models
        self._windows = windows

    def check(self, run_now: bool = False) -> None:
        """ModelUnavailable without a model; WindowClosed while the window is shut, unless `run_now`."""
        configured(self._models)
        if not run_now and not self._windows.state().open:
            raise WindowClosed(
                "the extraction window is closed (SGLang has the GPU); open one with "
                "`hsstore window open --minutes N`, or submit a job that waits for the next window"
            )
