"""Moving features in and out of the offline drafter pipelines: their layer-id conventions and the index an export
writes beside its files (`hsstore_export.json`), which an import reads back.

Layer ids differ by one between the pipelines, and an off-by-one costs acceptance silently (vLLM PR #40727: 4-5%):

- **hsstore and DFlash / SpecForge** (`target_layer_ids`): layer L is the *output* of decoder layer L, HF's
  `hidden_states[L + 1]`. SpecForge's DFlash files concatenate these layers, ascending, along the last axis.
- **speculators / vLLM** (`eagle_aux_hidden_state_layer_ids`): id k is the *input* of decoder layer k, HF's
  `hidden_states[k]`: our layer k - 1 (id 0 is the embedding output, our `embed`). The last id of a speculators file
  is the final layer, id num_layers (our num_layers - 1, before the final norm): it becomes
  `verifier_last_hidden_states`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from schemas.featureset import EMBED, FINAL_NORM, FeatureSet, LayerId

EXPORT_INDEX = "hsstore_export.json"


class ExchangeFormat(StrEnum):
    SPECFORGE = "specforge"  # rows_{g}-{g+2000}/data_{i}.ckpt: input_ids, loss_mask, hidden_states [1, T, L*H]
    SPECULATORS = "speculators"  # hidden_states/hs_{i}.safetensors: token_ids [T], hidden_states [T, L, H]


# Each format's files in a few words, as help texts say them
FORMAT_FILES: dict[ExchangeFormat, str] = {
    ExchangeFormat.SPECFORGE: "DFlash .ckpt files",
    ExchangeFormat.SPECULATORS: "a .safetensors file per sample",
}


def formats_help() -> str:
    return ", ".join(f"{fmt.value} ({files})" for fmt, files in FORMAT_FILES.items())


@dataclass(frozen=True, slots=True)
class LayerConvention:
    """How a format numbers layers: format id = hsstore layer + `offset`; `embed_id` is the embedding output's id,
    None where the format holds decoder layers only. No format holds the post-norm layer."""

    text: str
    offset: int
    embed_id: int | None

    def to_ids(self, layers: list[LayerId], fmt: ExchangeFormat) -> list[int]:
        """hsstore layers as the format names them; ValueError for a layer the format has no id for."""
        if FINAL_NORM in layers:
            raise ValueError(f"{fmt} files hold no post-norm layer: export without 'final_norm' (--layers)")
        if EMBED in layers and self.embed_id is None:
            raise ValueError(f"{fmt} files hold decoder layers only: export without 'embed' (--layers)")
        embed_id = self.embed_id if self.embed_id is not None else -1  # unreachable without one: refused above
        return [embed_id if layer == EMBED else int(layer) + self.offset for layer in layers]

    def from_ids(self, ids: list[int]) -> list[LayerId]:
        """A format's layer ids as hsstore layers (in the order given)."""
        if any(i < 0 for i in ids):
            raise ValueError(f"layer ids {ids} hold a negative id")
        return [EMBED if i == self.embed_id else i - self.offset for i in ids]


CONVENTIONS: dict[ExchangeFormat, LayerConvention] = {
    ExchangeFormat.SPECFORGE: LayerConvention(
        "dflash: id L = output of decoder layer L = HF hidden_states[L+1] (hsstore's own ids)", offset=0, embed_id=None
    ),
    ExchangeFormat.SPECULATORS: LayerConvention(
        "speculators/vllm: id k = input of decoder layer k = HF hidden_states[k] "
        "(hsstore layer k-1; 0 = embed); the last id is the final layer, num_layers",
        offset=1,
        embed_id=0,
    ),
}


def to_format_ids(layers: list[LayerId], fmt: ExchangeFormat) -> list[int]:
    return CONVENTIONS[fmt].to_ids(layers, fmt)


def from_format_ids(ids: list[int], fmt: ExchangeFormat) -> list[LayerId]:
    return CONVENTIONS[fmt].from_ids(ids)


class ExportedEntry(BaseModel):
    """One file of an export and the entry it holds."""

    model_config = ConfigDict(extra="forbid")

    file: str  # relative to the export directory
    prompt_hash: str
    content_hash: str
    sample: dict[str, Any]
    prompt_tokens: int
    completion_source: str | None = None
    loss_mask: str  # "entry": the entry's own; "ones": the entry has none (no completion), all tokens train


class ExportHeader(BaseModel):
    """What an export holds but its entries: the convention, the revision, backend and featureset of them all."""

    model_config = ConfigDict(extra="forbid")

    format: ExchangeFormat
    layer_convention: str
    layer_ids: list[int]  # in the format's convention, in the order the files hold them
    layers: list[LayerId]  # the same layers as hsstore names them
    num_layers: int | None = None  # the model's decoder layers (speculators' final-layer id)
    model_revision: str
    backend: str
    featureset: FeatureSet
    featureset_id: str
    hsstore_version: str


class ExportIndex(ExportHeader):
    """What an export holds, in whose convention: written last, so a directory with it is a complete export. An
    export writes it as its header's JSON followed by the entries, from a spool, never holding them together."""

    entries: list[ExportedEntry]
