"""One local Ray cluster for the tests that need one (the Ray Data stage and source): on 127.0.0.1, two CPUs, no
dashboard; started on first use, shut down with the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    import ray  # here, not at import: only these tests need it

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
