"""SGLang after a window: the same greedy tokens, or a loud report.

An SGLang whose weights come back as garbage after release and resume still answers every call with 200. So the
hand-over asks SGLang for a greedy completion of a fixed prompt before it releases the GPU, and again once SGLang is
healthy after the resume: other tokens mean it came back wrong. Then a `commands` hand-over restarts SGLang (stop,
start) and asks again; in every case the mismatch is logged as an error, counted in the metrics
(`hsstore_sglang_canary_mismatches_total`) and shown in the window status (`sglang_canary`) until a later window's
canary agrees. If SGLang cannot answer the first ask, the window's canary is `unchecked`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from service.errors import SGLangUnavailable
from service.host.handover import GpuHandover
from service.host.sglang import SGLangClient

log = logging.getLogger("hsstore.handover")

CanaryState = Literal["ok", "mismatch", "restarted", "unchecked"]
PROMPT = [1 + i * 7 for i in range(16)]  # fixed token ids, inside any vocabulary
NEW_TOKENS = 16


class CheckedHandover:
    """A hand-over whose resume is checked by SGLang's greedy canary."""

    def __init__(self, inner: GpuHandover, sglang: SGLangClient, on_mismatch: Callable[[], None] = lambda: None):
        self.inner = inner
        self.name = inner.name
        self.sglang = sglang
        self.on_mismatch = on_mismatch
        self.state: CanaryState | None = None  # the last window's verdict; None before any window
        self._before: list[int] | None = None

    def _canary(self) -> list[int] | None:
        try:
            return self.sglang.greedy([PROMPT], NEW_TOKENS)[0]
        except SGLangUnavailable as exc:
            log.warning("SGLang's canary could not be asked: %s", exc.message)
            return None

    def release(self) -> None:
        self._before = self._canary()
        self.inner.release()

    def resume(self) -> None:
        self.inner.resume()
        if self._before is None:
            self.state = "unchecked"
            return
        after = self._canary()
        if after == self._before:
            self.state = "ok"
            return
        self.on_mismatch()
        log.error(
            "SGLang came back from the window with other greedy tokens for the canary prompt (%s before, %s after): "
            "its weights or kernels are not what they were",
            self._before,
            after,
        )
        self.state = "mismatch"
        if self.inner.name == "commands":  # a restart loads the weights afresh
            log.error("restarting SGLang through the hand-over's commands")
            self.inner.release()
            self.inner.resume()
            if self._canary() == self._before:
                self.state = "restarted"
                log.warning("SGLang's canary agrees again after the restart")
