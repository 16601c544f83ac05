"""The heap a service built at start is frozen once per process, out of the cyclic collector's walks, while what it
allocates afterwards is collected as before (a cycle made later still goes)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

_FRESH_PROCESS = """
import gc, weakref
from service.host.python_heap import freeze_startup_heap

assert gc.get_freeze_count() == 0
assert freeze_startup_heap() is True
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen  # the modules' objects at the least
assert freeze_startup_heap() is False and gc.get_freeze_count() == frozen  # never again in this process

class Node:
    other = None

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze: only the collector frees it
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None
"""


def test_the_startup_heap_is_frozen_once_and_later_cycles_are_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
