"""Tests mirror the code: every package of ours (a folder with an `__init__.py`) has a test folder at the same path
under tests/ holding at least one test module, so whoever changes a module knows where its tests live and a new
package comes with its own."""

from __future__ import annotations

from tests.conftest import REPO

ROOTS = ("schemas", "compute", "service", "client", "hsstore")


def test_every_package_has_a_test_folder_of_its_own() -> None:
    packages = sorted(init.parent.relative_to(REPO) for root in ROOTS for init in (REPO / root).rglob("__init__.py"))
    assert len(packages) > len(ROOTS)  # the walk found the rooms, not just the roots
    without = [str(p) for p in packages if not any((REPO / "tests" / p).glob("test_*.py"))]
    assert without == [], f"packages with no test module under tests/ at their own path: {without}"
