"""The two offline pipelines' files, one entry each, to and from hsstore's layout.

- SpecForge (DFlash offline, `scripts/prepare_hidden_states.py`, read by its `load_feature_file`):
  `rows_{g}-{g+2000}/data_{i}.ckpt`, a `torch.save`d dict: `input_ids` int64 [T], `loss_mask` int64 [T],
  `hidden_states` bf16 [1, T, n_layers * H] (the layers concatenated along the last axis, ascending).
- speculators (`src/speculators/train/data.py`, `hs_connectors.FileTransfer`): `hidden_states/hs_{i}.safetensors`
  with `token_ids` int64 [T] and `hidden_states` bf16 [T, n_layers, H], the last layer the final one, inside a
  `datasets` folder of input_ids, loss_mask and seq_len (what its `ArrowDataset(datapath)` opens).

What a file holds becomes a `Found`: the tensors as hsstore stores them (hidden_states [T, L, H] bf16 with layers in
featureset order, input_ids int32, loss_mask uint8 when there is one).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import safe_open
from safetensors.torch import save as save_safetensors

from schemas.exchange import ExchangeFormat
from schemas.featureset import LayerId, layer_order
from schemas.files import atomic_write

SPECFORGE_GROUP = 2000  # files per rows_* folder, SpecForge's default `file_group_size`
SPECULATORS_DIR = "hidden_states"
SPECULATORS_METADATA = "hsstore"  # the safetensors metadata key of an exported file's provenance
SPECFORGE_DRAFT_CONFIG = "dflash_draft_config.json"  # the target-side fields of the DFlash draft config
_DATASETS_STATE = "state.json"  # what `save_to_disk` writes beside its Arrow files
_OLD_ROWS = "rows.jsonl"  # the loss masks of a speculators export written before the datasets folder
_SPECULATORS_FILE = re.compile(r"^hs_(\d+)\.safetensors$")


class FormatError(ValueError):
    """A file that is not what its format's reader expects."""


@dataclass(frozen=True)
class Found:
    source: str  # "format:relative/path"
    relative: str
    input_ids: torch.Tensor  # int32 [T]
    loss_mask: torch.Tensor | None  # uint8 [T]
    hidden_states: torch.Tensor  # bf16 [T, L, H], layers in featureset order
    layer_ids: list[int]  # in the format's convention: as given, or as an exported file's own metadata names them


@dataclass(frozen=True)
class ExportShape:
    """What an export knows of its features as a whole: the format's layer ids, the target's decoder layers (None
    where the service does not run the revision and none were given) and hidden size."""

    layer_ids: list[int]
    num_layers: int | None
    hidden_size: int


class FormatFiles(ABC):
    """One pipeline's files: where entry i goes and its bytes, what the pipeline's trainer needs beside them to
    train as they are, which layers it can take, and how its files are listed and read back. A new format is one
    subclass and one row of FORMATS (and its layer convention in schemas.exchange)."""

    fmt: ClassVar[ExchangeFormat]
    keeps_rows: ClassVar[bool] = False  # whether `finish` reads the rows (an export spools them until then)

    def check(self, chosen: list[LayerId], num_layers: int | None, revision: str) -> None:
        """ValueError for an export the pipeline could not train on as it is (any, unless a format says)."""
        return None

    @abstractmethod
    def path(self, index: int) -> str: ...

    @abstractmethod
    def encode(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, hidden: torch.Tensor, provenance: dict) -> bytes:
        """One entry's file. `provenance`: what the export knows of it (layer ids, hashes, revision, backend)."""

    def finish(self, out_dir: Path, rows: Path | None, shape: ExportShape) -> None:
        """What the trainer reads beside the files, written once they are: `rows`, for a format that `keeps_rows`, a
        JSONL spool of each entry's `input_ids` and `loss_mask`, in file order."""
        return None

    def loss_masks(self, directory: Path) -> list[torch.Tensor] | None:
        """An export's entries' loss masks, in file order, where its files hold none."""
        return None

    @abstractmethod
    def files(self, directory: Path) -> list[str]:
        """The format's files under `directory`, relative, in the order its own loader lists them."""

    @abstractmethod
    def read(self, path: Path, relative: str, layer_ids: list[int] | None) -> Found:
        """`layer_ids`: the format's ids of the file's layers in file order (None: the file's own metadata)."""


class SpecForge(FormatFiles):
    fmt = ExchangeFormat.SPECFORGE

    def finish(self, out_dir: Path, rows: Path | None, shape: ExportShape) -> None:
        """The DFlash draft config's target-side fields, to merge into the draft config SpecForge trains with: its
        offline reader never checks which layers a file holds, and its generated config picks layers of its own."""
        fragment: dict = {"dflash_config": {"target_layer_ids": shape.layer_ids}, "hidden_size": shape.hidden_size}
        if shape.num_layers is not None:
            fragment["num_target_layers"] = shape.num_layers
        atomic_write(out_dir / SPECFORGE_DRAFT_CONFIG, json.dumps(fragment, indent=1).encode(), durable=False)

    def path(self, index: int) -> str:
        group = index // SPECFORGE_GROUP * SPECFORGE_GROUP
        return f"rows_{group}-{group + SPECFORGE_GROUP}/data_{index}.ckpt"

    def encode(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, hidden: torch.Tensor, provenance: dict) -> bytes:
        """As SpecForge's DFlash offline loader reads it (no room for provenance: the export's index holds it).
        Fresh tensors: torch.save writes whole storages."""
        tokens, layers, width = hidden.shape
        record = {
            "input_ids": input_ids.to(torch.int64).clone(),
            "loss_mask": loss_mask.to(torch.int64).clone(),
            "hidden_states": hidden.reshape(1, tokens, layers * width).clone(),
        }
        buffer = io.BytesIO()
        torch.save(record, buffer)
        return buffer.getvalue()

    def files(self, directory: Path) -> list[str]:
        found = [p for p in directory.rglob("*") if p.is_file() and p.name.endswith((".ckpt", ".ckpt.gz"))]
        return sorted(str(p.relative_to(directory)) for p in found)

    def read(self, path: Path, relative: str, layer_ids: list[int] | None) -> Found:
        try:
            if path.name.endswith(".gz"):
                with gzip.open(path, "rb") as handle:
                    raw = torch.load(io.BytesIO(handle.read()), map_location="cpu", weights_only=True)
            else:
                raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a pickle of anything but plain tensors, a truncated zip, not a torch file at all
            raise FormatError(f"{relative}: not a SpecForge feature file torch.load reads as tensors: {exc}") from None
        if not isinstance(raw, dict) or not {"input_ids", "loss_mask", "hidden_states"} <= set(raw):
            keys = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
            raise FormatError(
                f"{relative}: not a DFlash offline file (input_ids, loss_mask, hidden_states); it holds {keys}"
            )
        hidden = raw["hidden_states"]
        if hidden.dim() == 3 and hidden.shape[0] == 1:
            hidden = hidden[0]
        if hidden.dim() != 2:
            shape = list(raw["hidden_states"].shape)
            raise FormatError(f"{relative}: hidden_states has shape {shape}; want [1, T, L*H]")
        if layer_ids is None:
            raise FormatError(f"{relative}: SpecForge files do not name their layers: give --layer-ids")
        tokens, width = hidden.shape
        if width % len(layer_ids):
            raise FormatError(f"{relative}: hidden_states are {width} wide, not a multiple of {len(layer_ids)} layers")
        hidden = hidden.reshape(tokens, len(layer_ids), width // len(layer_ids))
        return Found(
            f"specforge:{relative}",
            relative,
            _ids(raw["input_ids"], relative),
            _mask(raw["loss_mask"], relative),
            _bf16(hidden, relative),
            layer_ids,
        )


class Speculators(FormatFiles):
    """The export folder is what speculators' `ArrowDataset(datapath=...)` opens as it is: a `datasets` folder
    (`load_from_disk`: input_ids, loss_mask, seq_len per entry, torch format, as its prepare_data.py saves it) with
    `hidden_states/` inside. Written through `datasets` itself (the `speculators` extra; every speculators install
    has it), so the folder is exactly what that version's `load_from_disk` reads."""

    fmt = ExchangeFormat.SPECULATORS
    keeps_rows = True

    def check(self, chosen: list[LayerId], num_layers: int | None, revision: str) -> None:
        if importlib.util.find_spec("datasets") is None:
            raise ValueError(
                "a speculators export is a `datasets` folder: install it with pip install 'hsstore[speculators]'"
            )
        if num_layers is None:
            raise ValueError(f"the service does not run model_revision {revision}: give its number of layers")
        if chosen[-1] != num_layers - 1:
            raise ValueError(
                f"speculators' files end with the final layer (id {num_layers}, hsstore layer {num_layers - 1}), "
                f"which its trainer splits off as verifier_last_hidden_states; these layers end with {chosen[-1]}"
            )

    def path(self, index: int) -> str:
        return f"{SPECULATORS_DIR}/hs_{index}.safetensors"

    def encode(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, hidden: torch.Tensor, provenance: dict) -> bytes:
        tensors = {"token_ids": input_ids.to(torch.int64).contiguous(), "hidden_states": hidden.contiguous()}
        return save_safetensors(tensors, metadata={SPECULATORS_METADATA: json.dumps(provenance, sort_keys=True)})

    def finish(self, out_dir: Path, rows: Path | None, shape: ExportShape) -> None:
        """The rows read from their spool as `datasets` writes them (Arrow on disk, in a cache beside the spool):
        never all in memory."""
        import datasets

        assert rows is not None  # keeps_rows
        quiet = datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # the export's own bar counts the entries
        try:
            built = datasets.Dataset.from_generator(
                _spooled_rows, gen_kwargs={"path": str(rows)}, cache_dir=str(rows.parent / "datasets-cache")
            )
            built.with_format("torch").save_to_disk(str(out_dir))
        finally:
            if not quiet:
                datasets.enable_progress_bars()

    def loss_masks(self, directory: Path) -> list[torch.Tensor] | None:
        if (directory / _DATASETS_STATE).is_file():
            from datasets import load_from_disk

            return [torch.as_tensor(m, dtype=torch.uint8) for m in load_from_disk(str(directory))["loss_mask"]]
        if (directory / _OLD_ROWS).is_file():  # exports before the datasets folder
            lines = (directory / _OLD_ROWS).read_text().splitlines()
            return [torch.tensor(json.loads(line)["loss_mask"], dtype=torch.uint8) for line in lines if line.strip()]
        return None

    def files(self, directory: Path) -> list[str]:
        base = directory / SPECULATORS_DIR if (directory / SPECULATORS_DIR).is_dir() else directory
        numbered = [(int(m[1]), p) for p in base.iterdir() if (m := _SPECULATORS_FILE.match(p.name))]
        return [str(p.relative_to(directory)) for _, p in sorted(numbered)]

    def read(self, path: Path, relative: str, layer_ids: list[int] | None) -> Found:
        try:
            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
                names = set(handle.keys())
                if not {"token_ids", "hidden_states"} <= names:
                    raise FormatError(
                        f"{relative}: a speculators file holds token_ids and hidden_states; it holds {names}"
                    )
                input_ids, hidden = handle.get_tensor("token_ids"), handle.get_tensor("hidden_states")
        except FormatError:
            raise
        except Exception as exc:
            raise FormatError(f"{relative}: not a safetensors file: {exc}") from None
        if layer_ids is None and SPECULATORS_METADATA in metadata:
            layer_ids = json.loads(metadata[SPECULATORS_METADATA]).get("layer_ids")
        if layer_ids is None:
            raise FormatError(f"{relative}: the file does not name its layers: give --layer-ids (vLLM's ids)")
        if hidden.dim() != 3 or hidden.shape[1] != len(layer_ids):
            raise FormatError(
                f"{relative}: hidden_states has shape {list(hidden.shape)}; want [T, {len(layer_ids)} layers, H]"
            )
        return Found(
            f"speculators:{relative}", relative, _ids(input_ids, relative), None, _bf16(hidden, relative), layer_ids
        )


def _spooled_rows(path: str) -> Iterator[dict[str, Any]]:
    """A speculators export's rows as its prepare_data.py saves them: input_ids, loss_mask and seq_len."""
    with open(path) as lines:
        for line in lines:
            row = json.loads(line)
            yield {"input_ids": row["input_ids"], "loss_mask": row["loss_mask"], "seq_len": len(row["input_ids"])}


FORMATS: dict[ExchangeFormat, FormatFiles] = {files.fmt: files for files in (SpecForge(), Speculators())}


def in_featureset_order(layers: list[LayerId], hidden: torch.Tensor) -> tuple[list[LayerId], torch.Tensor]:
    """hsstore keeps layers sorted (embed, ascending, final_norm): reorder axis 1 to match, losslessly."""
    order = sorted(range(len(layers)), key=lambda i: layer_order(layers[i]))
    if order == list(range(len(layers))):
        return layers, hidden
    return [layers[i] for i in order], hidden[:, order].contiguous()


def _ids(ids: torch.Tensor, relative: str) -> torch.Tensor:
    ids = ids.reshape(-1) if ids.dim() == 2 and ids.shape[0] == 1 else ids
    if ids.dim() != 1 or ids.is_floating_point():
        raise FormatError(f"{relative}: token ids must be integers of shape [T], got {ids.dtype} {list(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= 2**31):
        raise FormatError(f"{relative}: token ids outside 0..2^31")
    return ids.to(torch.int32)


def _mask(mask: torch.Tensor, relative: str) -> torch.Tensor:
    mask = mask.reshape(-1) if mask.dim() == 2 and mask.shape[0] == 1 else mask
    if mask.dim() != 1 or (mask.numel() and (int(mask.min()) < 0 or int(mask.max()) > 1)):
        raise FormatError(f"{relative}: loss_mask must hold 0 and 1 in shape [T]")
    return mask.to(torch.uint8)


def _bf16(hidden: torch.Tensor, relative: str) -> torch.Tensor:
    if hidden.dtype != torch.bfloat16:
        raise FormatError(f"{relative}: hidden_states are {hidden.dtype}; hsstore imports bfloat16 (as extracted)")
    return hidden.contiguous()
