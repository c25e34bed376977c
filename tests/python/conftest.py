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

    def get(world_size, backend="hier", layout=None, env=None):
        """`layout`: simulated hosts, one letter per rank ("AABB": two hosts of two ranks). `env`: settings
        for every rank."""
        key = (world_size, backend, layout, tuple(sorted((env or {}).items())))
        pool = live.get(key)
        if pool is None or pool.broken:
            fixed = dict(env or {})
            # Small fragments, so the hierarchical schedules' pipelines run many fragments of odd sizes
            # even on the tests' modest buffers.
            each = (
                (lambda rank: {"HIER_HOST_ID": f"host-{layout[rank]}", "HIER_HIERARCHY_FRAGMENT_BYTES": "64K", **fixed})
                if layout
                else fixed
            )
            pool = live[key] = RankPool(world_size, backend=backend, env=each)
        return pool

    yield get
    for pool in live.values():
        pool.close()


def _orphaned_segments():
    """hier's shared-memory segments whose creator is gone (names are /dev/shm/hier-<pid>-<token>-<rank>)."""
    orphans = []
    for name in os.listdir("/dev/shm"):
        parts = name.split("-")
        if parts[0] == "hier" and len(parts) > 1 and parts[1].isdigit() and not os.path.exists(f"/proc/{parts[1]}"):
            orphans.append(name)
    return orphans


@pytest.fixture(autouse=True)
def no_shared_memory_left_behind():
    """However a test ends (killed ranks, timeouts), it must not leave segments in /dev/shm."""
    before = set(_orphaned_segments())
    yield
    left = sorted(set(_orphaned_segments()) - before)
    assert not left, f"shared-memory segments left in /dev/shm by dead processes: {left}"
