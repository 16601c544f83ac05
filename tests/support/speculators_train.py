"""Runs speculators' own trainer (`speculators.train.cli.main` over `TrainConfig.resolve(argv)`: its config
resolution, the hs-connectors backend registry, its ArrowDataset, collate and loaders, its draft model, Trainer and
optimizer) on the CPU, and writes the loss of every step to a JSON file. Run in an environment with speculators
installed (tests/client/training/test_speculators_backend.py builds one):

    python tests/support/speculators_train.py LOSSES.json -- <speculators train arguments>

speculators' Trainer puts the model and each batch on `cuda:LOCAL_RANK` (`speculators.train.distributed`'s
`_local_rank`, the int its `maybe_setup_distributed` reads from the environment); set to "cpu" right after that
call here, it runs them on the CPU; and its step timer's `torch.accelerator.synchronize()` (which raises where there
is no accelerator) waits for nothing, as there is nothing to wait for. Nothing else is changed.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch


class Losses(logging.Handler):
    """The trainer's per-step metrics (the mappings it logs to `speculators.metrics`, which propagate to the root
    logger: its own logging set-up replaces the handlers of `speculators.metrics` itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        if record.name != "speculators.metrics" or not isinstance(message, dict):
            return
        if isinstance(message.get("train"), dict):
            self.steps.append({"step": message["global_step"], "loss": float(message["train"]["loss"])})


def main(argv: list[str]) -> int:
    out, rest = Path(argv[0]), argv[argv.index("--") + 1 :]
    import speculators.train.cli as cli
    import speculators.train.distributed as distributed
    from speculators.train.config import TrainConfig

    topology = cli.maybe_setup_distributed

    def on_the_cpu(*args: Any, **kwargs: Any) -> None:
        topology(*args, **kwargs)
        distributed._local_rank = "cpu"  # type: ignore[assignment]  # the one change: the CPU for cuda:LOCAL_RANK

    cli.maybe_setup_distributed = on_the_cpu
    if not torch.accelerator.is_available():
        torch.accelerator.synchronize = lambda device=None: None  # the CPU's work is done when a call returns
    losses = Losses()
    logging.getLogger().addHandler(losses)
    cli.main(TrainConfig.resolve(rest))
    out.write_text(json.dumps(losses.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
