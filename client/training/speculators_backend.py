"""hsstore as a hidden-states backend of speculators' trainer (hs-connectors' registry; #62):

    speculators train --data-path DATA --hidden-states-backend hsstore --hsstore-url http://host:8000 \
        --hsstore-layers 2,31,60,63 [--hsstore-dataset NAME] ...

Row i of speculators' data folder (`input_ids`, `loss_mask`, what its prepare step writes) is the sample
`{"token_ids": input_ids}`, keyed as every other path keys it; its features are read from the service, verified on
receipt, and handed to speculators' `ArrowDataset` as its files hold them (`token_ids` int64 [T], `hidden_states`
bfloat16 [T, L, H], the layers in the featureset's order, the last the final one, which the trainer splits off as
`verifier_last_hidden_states`): the same tensors `hsstore export --format speculators` writes, with no file.

- `--hsstore-dataset` pins the run to a snapshot's versions (`hsstore dataset create`): each row is that snapshot's
  entry of its prompt hash; a row the snapshot does not hold is an error before the first step.
- Without it, the newest version of each row under `--hsstore-layers` is read, and rows not stored yet are extracted
  through the service (`--hsstore-on-missing extract`, the default: one warm job over the missing rows, submitted by
  rank 0 before the first step; other ranks and loader workers wait for it): cache-through that caches, once.

hs-connectors finds a backend only when the module that registers it is imported, and speculators reads the registry
when its config module is imported. `python -m client.training.speculators_backend install` writes a `.pth` file
into the environment's site-packages that imports this module right after `hs_connectors` itself
(`client/training/speculators_hook.py`); `uninstall` removes it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hs_connectors import HiddenStatesBackend, HiddenStatesTransfer

from client.client import DEFAULT_URL, FeatureClient
from client.training.cache_through import OnMissing
from client.training.speculators_hook import PTH_NAME, install, uninstall
from client.training.torch_data import FeatureDataset
from schemas.featureset import FeatureSet, parse_layers
from schemas.keys import FeatureKey
from schemas.prompt_hash import prompt_hash

NAME = "hsstore"


class HsstoreTransfer(HiddenStatesTransfer):
    """Row `file_idx` of the data folder as speculators' file of it would hold it, read from the service (a
    picklable `FeatureDataset`: each loader worker builds its own client)."""

    def __init__(self, reads: FeatureDataset) -> None:
        self.reads = reads

    def get_cached(self, file_idx: int) -> dict[str, torch.Tensor]:
        sample = self.reads[file_idx]
        return {"token_ids": sample["input_ids"].to(torch.int64), "hidden_states": sample["hidden_states"]}

    def get_generated(self, hs_transfer_params: dict[str, Any]) -> dict[str, torch.Tensor] | None:
        raise RuntimeError("the hsstore backend reads stored features (get_cached); it takes none from vLLM")


def _rows(data_path: str) -> list[dict[str, Any]]:
    """Each row of speculators' data folder as the sample that keys it."""
    from datasets import load_from_disk

    column = load_from_disk(data_path).with_format(None)["input_ids"]
    return [{"token_ids": [int(t) for t in ids]} for ids in column]


def _pinned(url: str, token: str | None, dataset: str, rows: Sequence[dict[str, Any]]) -> list[FeatureKey]:
    """Each row's entry in snapshot `dataset`: an error naming the rows it does not hold."""
    with FeatureClient(url, token) as client:
        index = client.dataset(dataset)
    position = {index.records[i]["prompt_hash"].tobytes().hex(): i for i in range(len(index))}
    hashes = [prompt_hash(row) for row in rows]
    missing = [i for i, h in enumerate(hashes) if h not in position]
    if missing:
        raise ValueError(
            f"{len(missing)} of {len(rows)} rows of the data folder are not in dataset {dataset} (the first: row "
            f"{missing[0]}): snapshot them, or train without --hsstore-dataset to extract what is missing"
        )
    return [index.key(position[h]) for h in hashes]


def _ends_with_the_final_layer(url: str, token: str | None, featureset: FeatureSet) -> None:
    """speculators splits the last layer off as the verifier's final hidden states: it must be the model's last
    decoder layer (checked where the service names its model)."""
    with FeatureClient(url, token) as client:
        model = client.info().model
    if model is not None and featureset.layers[-1] != model.num_layers - 1:
        raise ValueError(
            f"--hsstore-layers must end with the final layer ({model.num_layers - 1} of this {model.num_layers}-layer "
            f"model), which speculators splits off as verifier_last_hidden_states; they end with "
            f"{featureset.layers[-1]}"
        )


def _first_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"


@HiddenStatesBackend.register(NAME)
class HsstoreBackend(HiddenStatesBackend):
    """Features read from an hsstore service (see the module's docstring)."""

    @staticmethod
    def add_train_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--hsstore-url", default=os.environ.get("HSSTORE_URL", DEFAULT_URL))
        parser.add_argument(
            "--hsstore-layers",
            default=None,
            help="hsstore layer ids of the featureset, comma-separated, the final layer last (with no dataset)",
        )
        parser.add_argument("--hsstore-dtype", default="bfloat16", help="the featureset's dtype (with no dataset)")
        parser.add_argument("--hsstore-dataset", default=None, help="a snapshot's name or id: its versions only")
        parser.add_argument("--hsstore-backend", default=None, help="kernel backend of the entries (default: any)")
        parser.add_argument("--hsstore-on-missing", choices=("extract", "error"), default="extract")
        parser.add_argument("--hsstore-priority", type=int, default=10, help="the missing rows' warm job's priority")
        parser.add_argument("--hsstore-cache-dir", default=None, help="a local cache of read entries")

    @staticmethod
    def add_launch_args(parser: argparse.ArgumentParser) -> None:
        """Nothing: hsstore's service extracts; vLLM is not launched for it."""

    @staticmethod
    def from_train_args(args: argparse.Namespace, data_path: str) -> HsstoreTransfer:
        token = os.environ.get("HSSTORE_TOKEN")
        rows = _rows(data_path)
        common: dict[str, Any] = {"token": token, "cache_dir": args.hsstore_cache_dir}
        if args.hsstore_dataset is not None:
            keys = _pinned(args.hsstore_url, token, args.hsstore_dataset, rows)
            return HsstoreTransfer(FeatureDataset(args.hsstore_url, keys, **common))
        if not args.hsstore_layers:
            raise ValueError("--hidden-states-backend hsstore needs --hsstore-layers (or --hsstore-dataset)")
        featureset = FeatureSet(layers=parse_layers(args.hsstore_layers), dtype=args.hsstore_dtype)
        _ends_with_the_final_layer(args.hsstore_url, token, featureset)
        on_missing: OnMissing = args.hsstore_on_missing
        if on_missing == "extract" and not _first_rank():
            on_missing = "wait"  # rank 0 submits the one job
        reads = FeatureDataset(
            args.hsstore_url,
            samples=rows,
            featureset=featureset,
            backend=args.hsstore_backend,
            on_missing=on_missing,
            priority=args.hsstore_priority,
            **common,
        )
        return HsstoreTransfer(reads)

    @staticmethod
    def build_kv_transfer_config(args: argparse.Namespace) -> dict[str, Any]:
        raise ValueError("the hsstore backend has no vLLM side: extract with the hsstore service (hsstore warm)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client.training.speculators_backend", description=__doc__)
    parser.add_argument("action", choices=("install", "uninstall"))
    chosen = parser.parse_args(argv)
    path: Path | None = install() if chosen.action == "install" else uninstall()
    said = f"wrote {path}" if chosen.action == "install" else (f"removed {path}" if path else f"no {PTH_NAME} found")
    print(said, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
