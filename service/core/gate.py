"""Whether extraction may run here, now: a model must be configured (a replica without one serves stored features
only), and, unless an admin runs a job now, the GPU's downtime window must be open."""

from __future__ import annotations

from service.core.windows import Windows
from service.errors import ModelUnavailable, WindowClosed
from service.extraction.extractor import Extractor
from service.model.manager import ModelManager


class ExtractionGate:
    def __init__(self, models: ModelManager[Extractor] | None, windows: Windows) -> None:
        self._models = models
        self.windows = windows

    @property
    def has_model(self) -> bool:
        return self._models is not None

    @property
    def models(self) -> ModelManager[Extractor]:
        if self._models is None:
            raise ModelUnavailable("this replica has no model configured: it serves stored features only")
        return self._models

    def check_window(self) -> None:
        if not self.windows.state().open:
            raise WindowClosed(
                "the extraction window is closed (SGLang has the GPU); open one with "
                "`hsstore window open --minutes N`, or submit a job that waits for the next window"
            )
