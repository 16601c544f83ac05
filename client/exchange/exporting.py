"""Export stored entries as a SpecForge or speculators dataset (`hsstore export`), through the service's HTTP
API: every exported byte is verified on receipt, and the index is written last, so an export is whole or absent."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from client.client import FeatureClient
from client.exchange.formats import FORMATS, ExportShape
from schemas.api import ListedKey
from schemas.exchange import (
    CONVENTIONS,
    EXPORT_INDEX,
    ExchangeFormat,
    ExportedEntry,
    ExportHeader,
    ExportIndex,
    to_format_ids,
)
from schemas.featureset import FeatureSet, LayerId, normalise_layers
from schemas.files import atomic_write
from schemas.keys import EntryFilters
from schemas.manifest import Manifest
from schemas.resolution import newest_of

Advance = Callable[[], None]


def _one(values: Iterable[str], what: str, option: str) -> str:
    distinct = sorted(set(values))
    if len(distinct) != 1:
        raise ValueError(
            f"these entries span {len(distinct)} {what}s ({', '.join(distinct)[:200]}): pick one ({option})"
        )
    return distinct[0]


@dataclass(frozen=True)
class ExportChoice:
    """What an export writes: the newest version of each entry, as the key listing names them (listing order), and
    their featuresets by id. Keys, not manifests: a choice of 10^6 entries is held in a few hundred MB."""

    keys: list[ListedKey]
    featuresets: dict[str, FeatureSet]

    @classmethod
    def of(cls, manifests: Iterable[Manifest]) -> ExportChoice:
        listed = list(manifests)
        keys = [
            ListedKey(
                m.prompt_hash, m.content_hash, m.model_revision, m.backend, m.featureset_id, m.num_tokens, m.created_at
            )
            for m in listed
        ]
        return cls(keys, {m.featureset_id: m.featureset for m in listed})


def choose(
    client: FeatureClient,
    filters: Iterable[EntryFilters],
    measured_only: bool = False,
    holding: FeatureSet | None = None,
) -> ExportChoice:
    """The entries an export of what `filters` list writes (`newest_of` the key listing, as `newest_versions` of
    the manifests): each featureset read once, from one manifest of it."""
    featuresets: dict[str, FeatureSet] = {}

    def featureset_of(key: ListedKey) -> FeatureSet:
        if key.featureset_id not in featuresets:
            one = next(client.entries(prompt_hash=key.prompt_hash, featureset=key.featureset_id, page_size=1))
            featuresets[key.featureset_id] = one.featureset
        return featuresets[key.featureset_id]

    def entry(key: ListedKey) -> tuple[str, str, str, str]:
        return key.prompt_hash, key.model_revision, key.backend, key.featureset_id

    listed = (key for where in filters for key in client.keys(**where))
    chosen = newest_of(listed, entry, featureset_of, measured_only, holding)
    for key in chosen:
        featureset_of(key)
    return ExportChoice(chosen, featuresets)


@dataclass(frozen=True)
class Exported:
    """A written export: its header, how many entries, and where (`index()` reads the whole index back)."""

    header: ExportHeader
    entries: int
    directory: Path

    def index(self) -> ExportIndex:
        return ExportIndex.model_validate_json((self.directory / EXPORT_INDEX).read_bytes())


def export(
    client: FeatureClient,
    chosen: ExportChoice | Iterable[Manifest],
    fmt: ExchangeFormat,
    out_dir: Path,
    layers: list[LayerId] | None = None,
    num_layers: int | None = None,
    advance: Advance = lambda: None,
    replace: bool = False,
) -> Exported:
    """Write the chosen entries (one model revision, backend and featureset: a training set never mixes them) as
    `fmt` files, then the index. `layers`: a subset of the featureset's; `num_layers`: the model's decoder layers
    (speculators' last id is the final layer; taken from the service's model when it runs the revision).

    Streamed: each entry is fetched, verified and written in turn (its index line and, for speculators, its row
    spooled to disk), in a directory beside `out_dir` that becomes it when whole; a failed export leaves nothing."""
    if not isinstance(chosen, ExportChoice):
        chosen = ExportChoice.of(chosen)
    keys = chosen.keys
    if not keys:
        raise ValueError("no entries to export")
    earlier = out_dir.exists() and any(out_dir.iterdir())
    if earlier and not (replace and (out_dir / EXPORT_INDEX).is_file()):
        hint = "--replace replaces an earlier export" if (out_dir / EXPORT_INDEX).is_file() else "a new one"
        raise ValueError(f"{out_dir} is not empty: export into a new directory ({hint})")
    revision = _one((k.model_revision for k in keys), "model revision", "--model-revision")
    backend = _one((k.backend for k in keys), "backend", "--backend")
    used = [chosen.featuresets[fid] for fid in sorted({k.featureset_id for k in keys})]
    featureset = chosen.featuresets[keys[0].featureset_id]
    if layers is None:
        _one((k.featureset_id for k in keys), "featureset", "--featureset")
        picked = list(featureset.layers)
    else:  # entries of several featuresets (a union and a recipe's own) export alike when each holds the layers
        picked = normalise_layers(layers)
        for held in used:
            if missing := [layer for layer in picked if layer not in held.layers]:
                raise ValueError(f"layers {missing} are not in featureset {held.id} (it holds {held.layers})")
        _one((held.dtype for held in used), "dtype", "--featureset")
        if len(used) > 1:
            featureset = FeatureSet(layers=picked, dtype=featureset.dtype)
    files = FORMATS[fmt]
    ids = to_format_ids(picked, fmt)
    files.check(picked, num_layers, revision)
    header = ExportHeader(
        format=fmt,
        layer_convention=CONVENTIONS[fmt].text,
        layer_ids=ids,
        layers=picked,
        num_layers=num_layers,
        model_revision=revision,
        backend=backend,
        featureset=featureset,
        featureset_id=featureset.id,
        hsstore_version=_own_version(),
    )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.export-", dir=out_dir.parent))
    try:
        staged, spool = work / "export", _Spool(work, files.keeps_rows)
        staged.mkdir()
        hidden_size = 0
        for index, key in enumerate(keys):
            whole = picked == list(chosen.featuresets[key.featureset_id].layers)
            features = client.fetch(key.key(), layers=None if whole else picked)
            hidden, input_ids = features.hidden_states, features.input_ids  # fp8 arrives dequantised to bf16
            hidden_size = int(hidden.shape[-1])
            stored_mask = features.loss_mask
            mask = stored_mask if stored_mask is not None else torch.ones(input_ids.shape, dtype=torch.uint8)
            provenance = {
                "layer_ids": ids,
                "layer_convention": CONVENTIONS[fmt].text,
                "prompt_hash": key.prompt_hash,
                "content_hash": key.content_hash,
                "model_revision": revision,
                "backend": backend,
            }
            relative = files.path(index)
            atomic_write(staged / relative, files.encode(input_ids, mask, hidden, provenance), durable=False)
            manifest = features.manifest
            spool.add(
                ExportedEntry(
                    file=relative,
                    prompt_hash=manifest.prompt_hash,
                    content_hash=manifest.content_hash,
                    sample=manifest.sample,
                    prompt_tokens=manifest.prompt_tokens,
                    completion_source=manifest.completion_source,
                    loss_mask="entry" if stored_mask is not None else "ones",
                ),
                input_ids,
                mask,
            )
            advance()
        spool.close()
        files.finish(staged, spool.rows if files.keeps_rows else None, ExportShape(ids, num_layers, hidden_size))
        _write_index(staged / EXPORT_INDEX, header, spool.entries)  # last: the export is whole
        if earlier:
            shutil.rmtree(out_dir)  # only ever an earlier export: its index names it one
        os.replace(staged, out_dir)  # onto nothing, or an empty directory
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Exported(header, len(keys), out_dir)


class _Spool:
    """An export's entries (index lines) and, for a format that keeps them, rows (input ids and loss mask), on disk
    as they are written."""

    def __init__(self, work: Path, rows: bool) -> None:
        self.entries, self.rows = work / "entries.jsonl", work / "rows.jsonl"
        self._entries = self.entries.open("w")
        self._rows = self.rows.open("w") if rows else None

    def add(self, entry: ExportedEntry, input_ids: torch.Tensor, mask: torch.Tensor) -> None:
        self._entries.write(entry.model_dump_json() + "\n")
        if self._rows is not None:
            row = {"input_ids": input_ids.tolist(), "loss_mask": mask.tolist()}
            self._rows.write(json.dumps(row, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._entries.close()
        if self._rows is not None:
            self._rows.close()


def _write_index(path: Path, header: ExportHeader, entries: Path) -> None:
    """The index as `ExportIndex` reads it: the header's JSON, then the spooled entries as its `entries` list."""
    head = header.model_dump_json(indent=1)
    with path.open("w") as out, entries.open() as lines:
        out.write(head[: head.rindex("}")].rstrip() + ',\n "entries": [')
        for number, line in enumerate(lines):
            out.write(("," if number else "") + "\n  " + line.rstrip("\n"))
        out.write("\n ]\n}\n")
        out.flush()
        os.fsync(out.fileno())


def _own_version() -> str:
    """The installed hsstore's version; a source checkout run without installing it has none to name."""
    try:
        return version("hsstore")
    except PackageNotFoundError:
        return "unknown (not installed)"
