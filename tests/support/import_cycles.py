"""Print, as JSON, the groups of modules of the named packages that import each other directly or through others
(the strongly connected components of grimp's import graph, Tarjan's algorithm). Run by tests/test_layers.py."""

from __future__ import annotations

import json
import sys

import grimp


def cycles(packages: list[str]) -> list[list[str]]:
    graph = grimp.build_graph(*packages, cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(edges):
        if module not in index:
            visit(module)
    return groups


if __name__ == "__main__":
    print(json.dumps(cycles(sys.argv[1:])))
