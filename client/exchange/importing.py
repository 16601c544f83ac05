"""Import a SpecForge or speculators dataset, or an export, into a store (`hsstore import`), through the service's
HTTP API: every imported byte is hashed here and checked by the service against that hash."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from client.client import FeatureClient
from client.exchange import formats
from client.exchange.formats import FORMATS, Found
from compute.tensors import from_torch
from schemas.api import ImportRequest, ImportResult
from schemas.content_hash import content_hash
from schemas.exchange import (
    EXPORT_INDEX,
    ExchangeFormat,
    ExportedEntry,
    ExportIndex,
    from_format_ids,
)
from schemas.featureset import LayerId
from schemas.states import CompletionSource, ImportStatus
from schemas.tensors import RawTensor


@dataclass
class ImportSummary:
    counts: dict[ImportStatus, int] = field(default_factory=lambda: dict.fromkeys(ImportStatus, 0))
    warnings: list[str] = field(default_factory=list)
    results: list[ImportResult] = field(default_factory=list)


@dataclass(frozen=True)
class ImportPlan:
    """What an import will read: the files, in whose convention, and under which model revision."""

    fmt: ExchangeFormat
    files: list[str]
    layer_ids: list[int] | None
    model_revision: str
    index: ExportIndex | None


def plan_import(
    client: FeatureClient,
    directory: Path,
    fmt: ExchangeFormat | None,
    model_revision: str | None,
    layer_ids: list[int] | None,
) -> ImportPlan:
    """An hsstore export names its format, layers, revision and samples in its index; other dumps need the format
    and the layer ids said, and are recorded under the service's model revision unless another is given."""
    index = None
    if (directory / EXPORT_INDEX).is_file():
        index = ExportIndex.model_validate_json((directory / EXPORT_INDEX).read_bytes())
        if fmt is not None and fmt != index.format:
            raise ValueError(f"{directory} is a {index.format} export, not {fmt}")
        fmt = index.format
        layer_ids = layer_ids or index.layer_ids
        model_revision = model_revision or index.model_revision
    if fmt is None:
        raise ValueError(f"{directory} has no {EXPORT_INDEX}: give its --format")
    if model_revision is None:
        model = client.info().model
        if model is None:
            raise ValueError("this service runs no model: give the --model-revision the features were computed with")
        model_revision = model.model_revision
    files = [entry.file for entry in index.entries] if index else FORMATS[fmt].files(directory)
    if not files:
        raise ValueError(f"no {fmt} files under {directory}")
    return ImportPlan(fmt, files, layer_ids, model_revision, index)


def import_dir(
    client: FeatureClient,
    directory: Path,
    plan: ImportPlan,
    backend: str | None = None,
    advance: Callable[[], None] = lambda: None,
) -> ImportSummary:
    """Import every file of `plan` as one import run (the service spot-checks its first files against the model, and
    once one fails, the rest one by one); an entry already stored with the same bits is left as it is (idempotent)."""
    summary = ImportSummary()
    run = uuid.uuid4().hex
    by_file = {entry.file: entry for entry in plan.index.entries} if plan.index else {}
    files = FORMATS[plan.fmt]
    masks = files.loss_masks(directory) if plan.index else None  # an export's own, where its files hold none
    for position, relative in enumerate(plan.files):
        found = files.read(directory / relative, relative, plan.layer_ids)
        layers, hidden = formats.in_featureset_order(from_format_ids(found.layer_ids, plan.fmt), found.hidden_states)
        exported = by_file.get(relative)
        mask = found.loss_mask
        if masks is not None:
            mask = masks[position]
        request, tensors = _entry(found, layers, hidden, mask, exported, plan.model_revision, backend, run)
        result = client.import_entry(request, tensors)
        summary.counts[result.status] += 1
        summary.results.append(result)
        summary.warnings.extend(w for w in result.warnings if w not in summary.warnings)
        advance()
    return summary


def _entry(
    found: Found,
    layers: list[LayerId],
    hidden: torch.Tensor,
    mask: torch.Tensor | None,
    exported: ExportedEntry | None,
    model_revision: str,
    backend: str | None,
    run: str,
) -> tuple[ImportRequest, list[RawTensor]]:
    """The sample and tensors of one file: an export's own sample, else one made from the token ids and loss mask
    (prompt then a token-ids completion when the mask is one run of ones at the end; the ids alone otherwise)."""
    ids = found.input_ids
    tokens = int(ids.shape[0])
    if mask is not None and mask.shape != ids.shape:
        raise formats.FormatError(f"{found.relative}: loss_mask has {mask.shape[0]} tokens, input_ids {tokens}")
    if exported is not None:
        sample, prompt_tokens = exported.sample, exported.prompt_tokens
        completion_source = CompletionSource(exported.completion_source) if exported.completion_source else None
        mask = mask if exported.loss_mask == "entry" else None
    else:
        sample, prompt_tokens, mask = _sample_of(ids, mask)
        completion_source = CompletionSource.TOKEN_IDS if "completion" in sample else None
    tensors = [from_torch("hidden_states", hidden), from_torch("input_ids", ids)]
    if mask is not None:
        tensors.append(from_torch("loss_mask", mask))
    request = ImportRequest(
        sample=sample,
        layers=layers,
        model_revision=model_revision,
        backend=backend,
        source=found.source,
        content_hash=content_hash(tensors),
        prompt_tokens=prompt_tokens,
        completion_source=completion_source,
        run=run,
    )
    return request, tensors


def _sample_of(ids: torch.Tensor, mask: torch.Tensor | None) -> tuple[dict, int, torch.Tensor | None]:
    as_list = ids.tolist()
    if mask is None or bool(mask.all()):  # every token trains: what an entry without a loss mask means
        return {"token_ids": as_list}, len(as_list), None
    ones = mask.nonzero().flatten()
    start = int(ones[0]) if ones.numel() else len(as_list)
    if 0 < start < len(as_list) and bool(mask[start:].all()):
        sample = {"token_ids": as_list[:start], "completion": {"token_ids": as_list[start:]}}
        return sample, start, mask
    return {"token_ids": as_list}, len(as_list), mask
