"""Shrinks the GPU machine's carried wheels folder to fit a run's 64 MiB carry: re-compresses every wheel's members
with LZMA (pip reads any compression zipfile does; causal-conv1d's CUDA build and transformers' sources shrink by
2-3 MB each), keeps only the model families of transformers that the project loads (KEEP_MODELS: the other ~550
families are 40 of its 50 MB unpacked), and drops uvloop (uvicorn runs on asyncio's own loop without it; no GPU test
measures serving). httptools stays: the service's HTTP protocol is uvicorn's httptools one with a head deadline
(service/api/connections.py), so nothing of the service imports without it. With every dependency the service
imports, 78 MiB became ~53.

    python3 scripts/slim-wheels.py .whl
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

# transformers' model families the GPU runs load: the target's, and what its auto classes import on the way
KEEP_MODELS = frozenset({"auto", "qwen3_5", "qwen3_5_moe", "encoder_decoder"})
DROPPED = ("uvloop-",)


def _kept(name: str) -> bool:
    parts = name.split("/")
    is_model = len(parts) > 3 and parts[:2] == ["transformers", "models"]
    return not is_model or parts[2] in KEEP_MODELS


def recompress(wheel: Path) -> None:
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(slim, "w", compression=zipfile.ZIP_LZMA) as target:
        for info in source.infolist():
            if not _kept(info.filename):
                continue
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr = info.external_attr
            member.compress_type = zipfile.ZIP_LZMA
            target.writestr(member, source.read(info.filename))
    slim.replace(wheel)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".whl")
    for wheel in sorted(folder.glob("*.whl")):
        wheel.chmod(0o644)
        if wheel.name.startswith(DROPPED):
            wheel.unlink()
            continue
        recompress(wheel)
    total = sum(p.stat().st_size for p in folder.iterdir())
    print(f"{folder}: {total / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
