"""Named hier groups: made without torch.distributed's world, found by name, destroyed by name.

Across real processes (each rank makes its group from the job's store) and with threads as ranks in one
process (rank-local mode). Functional collectives reach every group by its name; results are checked
against local references.
"""

import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.distributed as dist

import torch_hier
from reference import check_equal, contribution, expected_reduction

c10d = torch.ops._c10d_functional


def _expect_error(fn, *fragments):
    try:
        fn()
    except RuntimeError as e:
        text = str(e).split("\nException raised from")[0]
        for fragment in fragments:
            assert fragment in text, f"expected '{fragment}' in: {text}"
        return text
    raise AssertionError(f"expected an error mentioning {fragments}")


def _check_collectives(name, rank, world, seed):
    """A few functional ops on the group named `name` (ranks 0..world-1), small and large."""
    for numel in (3, 100000):
        x = [contribution(r, numel, torch.float32, seed + r) for r in range(world)]
        out = c10d.wait_tensor(c10d.all_reduce(x[rank], "sum", name))
        check_equal(out, expected_reduction(x, "SUM", torch.float32), f"all_reduce on '{name}' x{numel}")
        out = c10d.wait_tensor(c10d.all_gather_into_tensor(x[rank], world, name))
        check_equal(out, torch.cat(x), f"all_gather_into_tensor on '{name}' x{numel}")
        big = [contribution(r, numel * world, torch.int64, seed + 10 + r) for r in range(world)]
        out = c10d.wait_tensor(c10d.reduce_scatter_tensor(big[rank], "max", world, name))
        check_equal(out, expected_reduction(big, "MAX", torch.int64).chunk(world)[rank], f"reduce_scatter on '{name}'")
        out = c10d.wait_tensor(c10d.broadcast(x[rank], world - 1, name))
        check_equal(out, x[world - 1], f"broadcast on '{name}'")


def case_named_groups(seed):
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    name = f"tp-{seed}"

    group = torch_hier.create_group(store, rank, world, name)
    assert (group.group_name, group.rank(), group.size()) == (name, rank, world)
    assert torch_hier.resolve_group(name).group_name == name
    _check_collectives(name, rank, world, seed)
    # The group object works as a c10d ProcessGroup too, and names itself in the work table.
    t = torch.ones(10)
    group.allreduce([t]).wait()
    assert torch.all(t == world)
    assert f"group '{name}'" in group._get_backend(torch.device("cpu")).work_table()

    _expect_error(lambda: torch_hier.create_group(store, rank, world, name), name, "exists already")
    _expect_error(lambda: torch_hier.resolve_group("no-such-group"), "no group named 'no-such-group'", name)
    world_name = dist.group.WORLD.group_name
    _expect_error(lambda: torch_hier.destroy_group(world_name), "torch.distributed made it",
                  "destroy_process_group")
    # torch.distributed's groups resolve the same way.
    assert torch_hier.resolve_group(world_name).rank() == rank

    # Two named groups over one store at once, one of them on a subset of the ranks.
    if world >= 2:
        pair = f"pair-{seed}"
        if rank < 2:
            torch_hier.create_group(store, rank, 2, pair, global_ranks=[0, 1])
            _check_collectives(pair, rank, 2, seed + 100)
        _check_collectives(name, rank, world, seed + 200)
        if rank < 2:
            torch_hier.destroy_group(pair)

    torch_hier.destroy_group(name)
    _expect_error(lambda: torch_hier.resolve_group(name), f"group '{name}' was destroyed")
    _expect_error(lambda: torch_hier.destroy_group(name), "destroyed already")
    _expect_error(lambda: c10d.all_reduce(torch.ones(1), "sum", name), name)
    # The name can be used again.
    torch_hier.create_group(store, rank, world, name)
    _check_collectives(name, rank, world, seed + 300)
    torch_hier.destroy_group(name)
    return True


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_named_groups_across_processes(pools, world_size):
    assert all(pools(world_size).run(case_named_groups, 40 + world_size))


def case_bad_arguments():
    store = dist.distributed_c10d._get_default_store()
    _expect_error(lambda: torch_hier.create_group(store, 0, 2, ""), "needs a name")
    _expect_error(lambda: torch_hier.create_group(store, 5, 2, "bad-rank"), "rank 5", "size 2")
    _expect_error(lambda: torch_hier.create_group(store, 0, 2, "bad-ranks", global_ranks=[0]), "globalRanks")
    return True


def test_bad_arguments_are_refused_clearly(pools):
    assert all(pools(1).run(case_bad_arguments))


# ---- threads as ranks ----------------------------------------------------------------------------------


def threads_as_ranks_main(world):
    """Runs in a fresh interpreter: `world` threads of one process are the ranks of group 'tp'."""
    torch_hier.set_thread_isolation_mode(True)
    store = dist.HashStore()
    errors = {}

    def rank_main(rank):
        try:
            torch_hier.create_group(store, rank, world, "tp")
            group = torch_hier.resolve_group("tp")
            assert group.rank() == rank, (group.rank(), rank)  # each thread sees its own group
            _check_collectives("tp", rank, world, seed=7)
            torch_hier.destroy_group("tp")
            _expect_error(lambda: torch_hier.resolve_group("tp"), "was destroyed")
        except BaseException as e:  # noqa: BLE001 - reported below
            import traceback

            errors[rank] = traceback.format_exc()
            raise

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # A thread that made no group sees none: names are per rank.
    seen = []
    probe = threading.Thread(target=lambda: seen.append(_expect_error(lambda: torch_hier.resolve_group("tp"),
                                                                       "no group named 'tp'")))
    probe.start()
    probe.join()
    if errors or not seen:
        raise SystemExit("\n".join(errors.values()) or "the probe thread saw a group")
    print("threads-as-ranks: ok")


@pytest.mark.parametrize("world_size", [2, 3])
def test_threads_as_ranks(world_size):
    here = os.path.dirname(__file__)
    code = f"import test_registry; test_registry.threads_as_ranks_main({world_size})"
    result = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": here})
    assert result.returncode == 0 and "threads-as-ranks: ok" in result.stdout, result.stdout + result.stderr
