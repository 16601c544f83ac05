"""The guide's Layout section against the tree: every module it names exists where it says, every room of the service
and every benchmark script is named there, and its layering is the one import-linter holds. A file added or moved, or
a layer changed, without the guide fails here."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

GUIDE = (REPO / "docs" / "guide.md").read_text()
LAYOUT = GUIDE.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
TOP = ("schemas", "compute", "service", "client", "hsstore", "benchmarks", "scripts", "deploy", "tests")


def _sections() -> dict[str, str]:
    """Each top-level directory's lines of the layout (a line opening with `name/` starts one)."""
    sections: dict[str, str] = {}
    current = None
    for line in LAYOUT.splitlines():
        opened = re.match(r"\s{4}(\w+)/\s", line)
        if opened and opened.group(1) in TOP:
            current = opened.group(1)
        if current is not None:
            sections[current] = sections.get(current, "") + line + "\n"
    return sections


def test_every_module_the_layout_names_is_in_its_directory() -> None:
    sections = _sections()
    assert set(sections) == set(TOP), sorted(sections)
    missing = []
    for top, text in sections.items():
        files = {path.name for path in (REPO / top).rglob("*") if path.is_file()}
        for prefix, name in re.findall(r"(\.{0,2}/?[\w/]*/)?([\w-]+\.(?:py|sh))\b", text):
            if prefix.startswith(".."):
                continue  # beside the repository (../shared/)
            found = (REPO / prefix / name).is_file() if prefix else name in files  # a path: from the root
            if not found:
                missing.append(f"{top}: {prefix}{name}")
    assert not missing, missing


def test_every_room_of_the_service_and_every_benchmark_is_named() -> None:
    sections = _sections()
    rooms = sorted(p.name for p in (REPO / "service").iterdir() if (p / "__init__.py").is_file())
    assert [room for room in rooms if f"{room}/" not in sections["service"]] == []
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if p.name != "__init__.py")
    assert [script for script in scripts if script not in sections["benchmarks"]] == []


def test_the_layering_the_guide_states_is_the_contract_s() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers" and "containers" not in c)
    stated = re.search(r"from the\s+top down: `([^`]+)`", LAYOUT)
    assert stated is not None, "the guide's layering paragraph names the layers from the top down"
    assert " ".join(stated.group(1).split()) == layers["name"].removeprefix("layers: ")
    # and the contract's name says its layers in their order
    assert len(layers["name"].split(" > ")) == len(layers["layers"])
