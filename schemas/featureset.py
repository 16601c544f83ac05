"""Featuresets: which layers (DFlash convention), in which dtype, and what of the target's next-token distribution an
entry holds, and their short content id."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from schemas.prompt_hash import canonical_json
from schemas.validation import json_integer

EMBED: Final = "embed"
FINAL_NORM: Final = "final_norm"


def _layer(value: object) -> object:
    """A layer as JSON gives it: an index (an integral number, 5 or 5.0, never true or false) or embed/final_norm;
    checked here, before the union, so a refusal says what a layer is rather than why each branch refused it."""
    if isinstance(value, str) and value in (EMBED, FINAL_NORM):
        return value
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not value.is_integer())
    ):
        raise ValueError(f"a layer is an index (0, 1, ...) or 'embed' / 'final_norm', not {str(value)[:40]!r}")
    if value < 0:
        raise ValueError(f"layer {int(value)} is negative")
    return int(value)


# decoder layers count from 0
LayerId = Annotated[Annotated[int, Field(ge=0)] | Literal["embed", "final_norm"], BeforeValidator(_layer)]
# bfloat16 as the model computes it, or float8 (e4m3) with one float32 scale per token and layer (`compute/fp8.py`);
# what each is, as help texts say it (a test holds the table to the Literal)
FeatureDtype = Literal["bfloat16", "float8_e4m3fn"]
FEATURE_DTYPES: dict[str, str] = {
    "bfloat16": "as the model computes it",
    "float8_e4m3fn": "half the bytes; a float32 scale per token and layer",
}
MAX_TOP_K = 1024
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K), BeforeValidator(json_integer)]  # 4.0 is 4, as JSON has it


def layer_order(layer: LayerId) -> int:
    """embed first, decoder layers by index, final_norm last."""
    if layer == EMBED:
        return -1
    if layer == FINAL_NORM:
        return 1 << 30
    return int(layer)


def build_target_layer_ids(num_layers: int, num_draft_layers: int = 5) -> list[int]:
    """DFlash's default capture layers: evenly from 1 to num_layers-3 ([1,16,31,46,61] for 64 layers)."""
    if num_draft_layers == 1:
        return [num_layers // 2]
    start, end = 1, num_layers - 3
    span = end - start
    return [round(start + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def parse_layer(token: str) -> LayerId:
    """A layer named in a query string: an integer or embed/final_norm."""
    token = token.strip()
    if token in (EMBED, FINAL_NORM):
        return EMBED if token == EMBED else FINAL_NORM
    try:
        return int(token)
    except ValueError:
        raise ValueError(f"layer {token[:40]!r} is neither an integer nor 'embed'/'final_norm'") from None


# what parse_layers takes, for the API's schema (an integer too large for any model is refused by the model's check)
LAYERS_PATTERN = r"^ *(embed|final_norm|[0-9]+) *(, *(embed|final_norm|[0-9]+) *)*$"


def parse_layers(text: str) -> list[LayerId]:
    """A comma-separated layer list as written in query strings and on the command line, in the order given."""
    if not text.strip():
        raise ValueError("the layer list is empty")
    return [parse_layer(token) for token in text.split(",")]


def normalise_layers(layers: list[LayerId]) -> list[LayerId]:
    """A featureset's layers as a set: unique, 'embed' first, ascending indices, 'final_norm' last."""
    return sorted(set(layers), key=layer_order)


class FeatureSet(BaseModel):
    """The layer list and dtype; `target_ids` adds the target's argmax next tokens, `top_k` its k most likely next
    tokens with their log-probabilities (over the whole vocabulary) and the probability mass they hold."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    layers: Annotated[list[LayerId], Field(min_length=1, max_length=1024)]
    dtype: FeatureDtype = "bfloat16"
    target_ids: bool = False
    top_k: TopK | None = None

    @field_validator("layers")
    @classmethod
    def _normalised(cls, layers: list[LayerId]) -> list[LayerId]:
        """Any order is accepted and normalised, so one set of layers has one id however it was written."""
        return normalise_layers(layers)

    def canonical(self) -> dict[str, object]:
        """The identity form: `target_ids` and `top_k` appear only when set, so plain layer sets hash as they always
        have."""
        form: dict[str, object] = {"layers": list(self.layers), "dtype": self.dtype}
        if self.target_ids:
            form["target_ids"] = True
        if self.top_k is not None:
            form["top_k"] = self.top_k
        return form

    def params(self) -> dict[str, object]:
        """The featureset as query parameters (a JSONL job upload's): the inverse of `from_params`."""
        found: dict[str, object] = {
            "layers": ",".join(map(str, self.layers)),
            "dtype": self.dtype,
            "target_ids": self.target_ids,
        }
        if self.top_k is not None:
            found["top_k"] = self.top_k
        return found

    @classmethod
    def from_params(
        cls, layers: str | None, dtype: str = "bfloat16", target_ids: bool = False, top_k: int | None = None
    ) -> FeatureSet | None:
        """A featureset from its parts as a query string or a command line gives them (None: no layers, the
        service's default); ValueError for one that cannot be, in words (pydantic's ValidationError is one)."""
        if layers is None:
            if dtype != "bfloat16" or target_ids or top_k is not None:
                raise ValueError("dtype, target_ids and top_k describe a featureset: give its layers too")
            return None
        # dtype is a name to validate: pydantic refuses one it does not know, in words
        return cls(layers=parse_layers(layers), dtype=dtype, target_ids=target_ids, top_k=top_k)  # type: ignore[arg-type]

    def holds(self, wanted: FeatureSet) -> bool:
        """Whether an entry of this featureset serves a read of `wanted`, sliced to its layers: the same dtype, every
        layer it names, target ids if it asks for them, and the same top-k if it asks for one (a larger k is not
        enough: its `topk_mass` sums over more tokens)."""
        return self.has(wanted.dtype, wanted.target_ids, wanted.top_k, wanted.layers)

    def has(
        self,
        dtype: FeatureDtype | None = None,
        target_ids: bool | None = None,
        top_k: int | None = None,
        layers: Iterable[LayerId] | None = None,
    ) -> bool:
        """Whether this featureset has every part named (None: any): the dtype, target ids if asked, that top-k,
        every one of the layers."""
        return (
            (dtype is None or self.dtype == dtype)
            and (not target_ids or self.target_ids)
            and (top_k is None or self.top_k == top_k)
            and (layers is None or set(layers) <= set(self.layers))
        )

    @property
    def needs_logits(self) -> bool:
        """Whether an extraction runs the lm_head (in chunks) after the final norm."""
        return self.target_ids or self.top_k is not None

    @property
    def id(self) -> str:
        return hashlib.sha256(canonical_json(self.canonical())).hexdigest()[:16]

    def check_against(self, num_layers: int, vocab_size: int | None = None) -> None:
        """Raise ValueError if a layer index does not exist in a model of `num_layers` decoder layers, or `top_k`
        exceeds its vocabulary."""
        if self.top_k is not None and vocab_size is not None and self.top_k > vocab_size:
            raise ValueError(f"top_k {self.top_k} exceeds the model's vocabulary of {vocab_size}")
        for layer in self.layers:
            if isinstance(layer, int) and layer >= num_layers:
                raise ValueError(
                    f"layer {layer} is out of range: the model has {num_layers} layers (0..{num_layers - 1})"
                )

    @classmethod
    def default_for(cls, num_layers: int) -> FeatureSet:
        layers: list[LayerId] = list(build_target_layer_ids(num_layers, 5 if num_layers >= 8 else 1))
        return cls(layers=layers)


def union_of(recipes: Iterable[FeatureSet]) -> FeatureSet:
    """The one featureset that holds every recipe (`FeatureSet.holds`): their layers together, target ids if any
    asks; ValueError for recipes no one featureset holds (two dtypes, two top-k)."""
    found = list(recipes)
    if not found:
        raise ValueError("a union needs at least one recipe")
    if len(dtypes := {f.dtype for f in found}) > 1:
        raise ValueError(f"recipes in {sorted(dtypes)}: one featureset has one dtype")
    if len(top_ks := {f.top_k for f in found if f.top_k is not None}) > 1:
        raise ValueError(f"recipes with top-k {sorted(top_ks)}: one featureset holds one top-k")
    return FeatureSet(
        layers=[layer for f in found for layer in f.layers],
        dtype=found[0].dtype,
        target_ids=any(f.target_ids for f in found),
        top_k=next(iter(top_ks), None),
    )
