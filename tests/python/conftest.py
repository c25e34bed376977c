import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from harness import RankPool  # noqa: E402

# Tests that grep stderr must not see UCX's notice about variables it does not know.
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")


@pytest.fixture(scope="session")
def pools():
    """Returns a live RankPool for a world size (and backend), reusing one per size across tests."""
    live = {}

    def get(world_size, backend="hier", layout=None):
        """`layout`: simulated hosts, one letter per rank ("AABB": two hosts of two ranks)."""
        key = (world_size, backend, layout)
        pool = live.get(key)
        if pool is None or pool.broken:
            env = (lambda rank: {"HIER_HOST_ID": f"host-{layout[rank]}"}) if layout else None
            pool = live[key] = RankPool(world_size, backend=backend, env=env)
        return pool

    yield get
    for pool in live.values():
        pool.close()
