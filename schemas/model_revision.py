"""model_revision: the hub commit of a snapshot directory, else a content hash of the files that define the model."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from schemas.prompt_hash import canonical_json

_SNAPSHOT = re.compile(r"^[0-9a-f]{40}$")
# Files that change the computation: config, generation config, tokenizer, weights (and their index).
_DEFINING = re.compile(
    r"^(config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json"
    r"|added_tokens\.json|chat_template\.jinja|chat_template\.json|vocab\.json|merges\.txt|tokenizer\.model"
    r"|.*\.safetensors|.*\.safetensors\.index\.json|pytorch_model.*\.bin|pytorch_model\.bin\.index\.json)$"
)
_BLOCK = 8 * 1024 * 1024


def defining_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.rglob("*") if p.is_file() and _DEFINING.match(p.name))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def hub_commit(model_dir: Path) -> str | None:
    """`.../snapshots/<40-hex commit>` is how huggingface_hub lays out a downloaded revision."""
    model_dir = model_dir.resolve()
    if model_dir.parent.name == "snapshots" and _SNAPSHOT.match(model_dir.name):
        return model_dir.name
    return None


def model_revision(model_dir: Path, file_hashes: dict[str, str] | None = None) -> str:
    """docs/design.md's model_revision; `file_hashes` (relative path -> sha256) may come from a cache."""
    if commit := hub_commit(model_dir):
        return commit
    if file_hashes is None:
        file_hashes = {p.relative_to(model_dir).as_posix(): file_sha256(p) for p in defining_files(model_dir)}
    if not file_hashes:
        raise FileNotFoundError(f"{model_dir} holds no config, tokenizer or weight files")
    listing = "".join(f"{rel}\t{sha}\n" for rel, sha in sorted(file_hashes.items()))
    return "sha256:" + hashlib.sha256(listing.encode()).hexdigest()


def synthetic_revision(config: dict[str, Any], seed: int) -> str:
    """The revision of a model built in memory from a config and a seed (benchmarks; no files to hash)."""
    return "sha256:" + hashlib.sha256(canonical_json({"config": config, "seed": seed})).hexdigest()
