"""The model's lifecycle: load on demand (after SGLang let go of the GPU and it has room), unload when idle or when
the window ends (and give the GPU back), and finish a hand-over a crashed process left half done.

Every step is announced through `on_event` ("release", "load", "unload", "resume", ...), which is how the tests see
the order of what happened beside the calls SGLang received.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import torch

from service.errors import ModelUnavailable
from service.host.handover import GpuHandover, HandoverLedger
from service.host.sglang_canary import CheckedHandover
from service.model.loader import LoadedModel, ModelSpec, load_weights

log = logging.getLogger("hsstore.model")
# What works with a loaded model (the extractor): the composition root says which; the manager only holds it.
E = TypeVar("E")


class ModelManager(Generic[E]):
    def __init__(
        self,
        spec: ModelSpec,
        make_extractor: Callable[[LoadedModel], E],
        handover: GpuHandover,
        ledger: HandoverLedger,
        *,
        attn_implementation: str = "sdpa",
        devices: str | None = None,
        idle_unload_s: float | None = None,
        memory_wait_s: float = 300.0,
        preloaded: LoadedModel | None = None,
        on_event: Callable[[str], None] | None = None,
        loads_weights: bool = True,
    ) -> None:
        """`loads_weights`: False on an API replica of a cluster (its workers own the GPUs): the spec (config,
        tokenizer, revision) serves submissions and estimates, and nothing here ever loads the weights."""
        self.spec = spec
        self.loads_weights = loads_weights
        self.make_extractor = make_extractor
        self.handover = handover
        self.ledger = ledger
        self.attn_implementation = attn_implementation
        self.devices = devices  # `cuda:0,cuda:1`: the model spread over both (service/model/placement.py)
        self.idle_unload_s = idle_unload_s
        self.memory_wait_s = memory_wait_s
        self.on_event = on_event
        self._lock = threading.RLock()
        self._extractor = make_extractor(preloaded) if preloaded is not None else None
        self._last_used = time.monotonic()
        self._users = 0  # extractions running now: the GPU is never given back under them

    def emit(self, event: str) -> None:
        log.info("model: %s", event)
        if self.on_event is not None:
            self.on_event(event)

    @property
    def sglang_canary(self) -> str | None:
        """SGLang's canary verdict after the last window (service/host/sglang_canary.py), if it is checked."""
        return self.handover.state if isinstance(self.handover, CheckedHandover) else None

    @property
    def loaded(self) -> bool:
        return self._extractor is not None

    @property
    def current(self) -> E | None:
        """The loaded model's extractor, or None: never loads (what `/v1/info` and `/metrics` read)."""
        return self._extractor

    def extractor(self) -> E:
        """The loaded model's extractor, loading it first if needed."""
        with self._lock:
            if self._extractor is None:
                self._load()
            self._last_used = time.monotonic()
            assert self._extractor is not None
            return self._extractor

    @contextmanager
    def using(self) -> Iterator[E]:
        """The extractor, held in use until the block ends: `give_back_if_idle` waits for every user."""
        with self._lock:
            extractor = self.extractor()
            self._users += 1
        try:
            yield extractor
        finally:
            with self._lock:
                self._users -= 1
                self._last_used = time.monotonic()

    def give_back_if_idle(self, after_s: float = 0.0) -> bool:
        """Unload and give the GPU back if nothing uses the model and it has been idle `after_s`; True if it did."""
        with self._lock:
            if self._extractor is None or self._users or time.monotonic() - self._last_used < after_s:
                return False
            self.unload()
            return True

    def _load(self) -> None:
        if not self.loads_weights:
            raise ModelUnavailable(
                "this replica extracts nothing itself (run_jobs=false: the cluster's workers own the GPUs); submit a "
                "job instead (`hsstore warm`, POST /v1/jobs), which the workers run"
            )
        if self.handover.name != "none":
            self.ledger.mark_released()  # before asking: a crash from here on is finished at the next start
            self.emit("release")
            self.handover.release()
        try:
            self._wait_for_memory()
            self._extractor = self.make_extractor(load_weights(self.spec, self.attn_implementation, self.devices))
        except Exception as exc:
            self._give_back()
            raise ModelUnavailable(f"could not load {self.spec.path}: {exc}") from exc
        self.emit("load")

    def _wait_for_memory(self) -> None:
        """SGLang frees memory asynchronously: wait until the GPU has room for the weights plus a margin."""
        if self.spec.device.type != "cuda":
            return
        needed = int(self.spec.weights_bytes * 1.15) + (4 << 30)
        deadline = time.monotonic() + self.memory_wait_s
        while True:
            free, _ = torch.cuda.mem_get_info(self.spec.device)
            if free >= needed:
                return
            if time.monotonic() > deadline:
                raise ModelUnavailable(
                    f"the GPU has {free / 2**30:.1f} GiB free after {self.memory_wait_s:.0f} s; "
                    f"the model needs {needed / 2**30:.1f} GiB"
                )
            time.sleep(1.0)

    def unload(self) -> None:
        """Drop the weights and give the GPU back to SGLang."""
        with self._lock:
            if self._extractor is not None:
                self._extractor = None
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                self.emit("unload")
            self._give_back()

    def _give_back(self) -> None:
        if self.ledger.held():
            self.emit("resume")
            self.handover.resume()
            self.ledger.mark_resumed()
            self.emit("healthy")

    def unload_if_idle(self) -> None:
        if self.idle_unload_s is not None:
            self.give_back_if_idle(self.idle_unload_s)

    def recover(self) -> None:
        """At start-up: if a previous process took the GPU and died holding it, give it back now."""
        if self.ledger.held():
            self.emit("recover")
            self._give_back()
