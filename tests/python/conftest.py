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

    def get(world_size, backend="hier"):
        key = (world_size, backend)
        pool = live.get(key)
        if pool is None or pool.broken:
            pool = live[key] = RankPool(world_size, backend=backend)
        return pool

    yield get
    for pool in live.values():
        pool.close()
