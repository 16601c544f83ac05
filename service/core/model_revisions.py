"""Which model_revision a model directory is. A host that runs jobs hashes its files (weights included, cached by
size and mtime) and records the revision in the shared catalog under a digest of the files besides the weights; an
API replica takes the revision recorded for its config and tokenizer, so it needs neither the weights nor minutes of
hashing."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from schemas.model_revision import defining_files, file_sha256, hub_commit
from service.catalog.protocol import KeyValue
from service.errors import ConfigError
from service.model.revision_cache import cached_model_revision

_WEIGHTS = re.compile(r"^(.*\.safetensors|pytorch_model.*\.bin)$")  # the files a replica need not have
_RECORDED = "model_revisions/"  # + the digest of a model's files besides its weights -> the revisions seen


def model_revision_for(model_dir: Path, kv: KeyValue, cache_file: Path, runs_jobs: bool, writable: bool) -> str:
    model_dir = model_dir.resolve()
    if commit := hub_commit(model_dir):
        return commit
    name = _RECORDED + _light_digest(model_dir)
    seen: list[str] = json.loads(kv.kv_get(name) or "[]")
    if not runs_jobs:
        if len(seen) == 1:  # two weight sets behind one config (mid-upgrade): hash, as a worker does
            return seen[0]
        if not any(_WEIGHTS.match(p.name) for p in defining_files(model_dir)):
            recorded = (
                f"workers recorded {len(seen)} revisions for its config and tokenizer ({', '.join(seen)})"
                if seen
                else "no worker has recorded the revision of its config and tokenizer in the catalog yet"
            )
            raise ConfigError(
                f"{model_dir} holds no weights, and {recorded}: start a worker first, or give this replica the weights"
            )
    revision = cached_model_revision(model_dir, cache_file)
    if writable and revision not in seen:
        kv.kv_set(name, json.dumps(sorted({*seen, revision})))
    return revision


def _light_digest(model_dir: Path) -> str:
    """A digest of the files that define a model besides its weights (config, tokenizer, the weights' index)."""
    listing = "".join(
        f"{p.relative_to(model_dir).as_posix()}\t{file_sha256(p)}\n"
        for p in defining_files(model_dir)
        if not _WEIGHTS.match(p.name)
    )
    return hashlib.sha256(listing.encode()).hexdigest()
