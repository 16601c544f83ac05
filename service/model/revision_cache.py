"""model_revision computed once per model directory: file digests cached by (path, size, mtime) on disk, since
hashing 52 GB of weights takes minutes."""

from __future__ import annotations

import json
from pathlib import Path

from schemas.files import atomic_write
from schemas.model_revision import defining_files, file_sha256, hub_commit, model_revision


def cached_model_revision(model_dir: Path, cache_file: Path) -> str:
    model_dir = model_dir.resolve()
    if commit := hub_commit(model_dir):
        return commit
    try:
        cache: dict[str, str] = json.loads(cache_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        cache = {}
    hashes: dict[str, str] = {}
    for path in defining_files(model_dir):
        stat = path.stat()
        key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
        if key not in cache:
            cache[key] = file_sha256(path)
        hashes[path.relative_to(model_dir).as_posix()] = cache[key]
    # a lost cache costs a re-hash, never a wrong revision: no fsync
    atomic_write(cache_file, json.dumps(cache, indent=0, sort_keys=True).encode(), durable=False)
    return model_revision(model_dir, hashes)
