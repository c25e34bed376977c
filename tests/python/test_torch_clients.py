"""torch's own clients of a process group that Gloo serves and hier must serve too (issue 12):
monitored_barrier, as Gloo's, naming the ranks that did not come."""

import inspect
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from harness import run_job

# torch before 2.15 refuses monitored_barrier in Python for every backend not named "gloo".
MONITORED_BARRIER_GLOO_ONLY = "Backend.GLOO" in inspect.getsource(dist.monitored_barrier)
needs_monitored_barrier = pytest.mark.skipif(
    MONITORED_BARRIER_GLOO_ONLY,
    reason=f"torch {torch.__version__} allows monitored_barrier on backends named 'gloo' only (its Python checks the name)",
)


def _error(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e).split("\nException raised from")[0]
    raise AssertionError("the monitored barrier passed although a rank stayed away")


def case_monitored_barrier():
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = timedelta(seconds=1)

    def check_collectives_in_step():
        t = torch.full((10,), float(rank))
        dist.all_reduce(t)
        assert torch.all(t == sum(range(world))), t

    # Everyone comes: it passes, with and without wait_all_ranks, between collectives that stay in step.
    for wait_all in (False, True, False):
        check_collectives_in_step()
        dist.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all)
    check_collectives_in_step()

    # Rank 1 stays away: rank 0 names it; the others say rank 0 did not answer.
    if rank == 1:
        time.sleep(2)
    elif rank == 0:
        text = _error(lambda: dist.monitored_barrier(timeout=timeout))
        assert "Rank 1 failed to pass monitoredBarrier in 1000 ms" in text, text
    else:
        text = _error(lambda: dist.monitored_barrier(timeout=timeout))
        assert f"Rank {rank} successfully reached monitoredBarrier, but received errors" in text, text
    # The group is still usable, and a monitored barrier everyone comes to passes again.
    check_collectives_in_step()
    dist.monitored_barrier(timeout=timedelta(seconds=5))

    # Every rank but 0 stays away; with wait_all_ranks rank 0 names them all.
    if rank == 0:
        text = _error(lambda: dist.monitored_barrier(timeout=timeout, wait_all_ranks=True))
        names = ", ".join(str(r) for r in range(1, world))
        assert f"Ranks {names} failed to pass monitoredBarrier" in text, text
    else:
        time.sleep(1.5)
    check_collectives_in_step()

    # On a subgroup of ranks 0 and 2; the others are not in it and return at once.
    sub = dist.new_group([0, 2])
    start = time.monotonic()
    dist.monitored_barrier(sub, timeout=timeout)  # rank 1 is not a member: it returns at once
    assert rank != 1 or time.monotonic() - start < 0.5
    # A timeout of zero fails on rank 0 at once.
    if rank == 0:
        text = _error(lambda: dist.group.WORLD.monitored_barrier(timedelta(seconds=0)))
        assert "Rank 0 timed out in monitoredBarrier" in text, text
    check_collectives_in_step()
    return "ok"


@needs_monitored_barrier
def test_monitored_barrier_names_the_ranks_that_did_not_come():
    assert run_job(3, case_monitored_barrier, timeout_s=20) == ["ok"] * 3


def case_split_group():
    rank, world = dist.get_rank(), dist.get_world_size()
    halves = [[0, 1], [2, 3]]
    sub = dist.split_group(split_ranks=halves, timeout=timedelta(seconds=20))
    mine = halves[rank // 2]
    assert dist.get_process_group_ranks(sub) == mine
    assert dist.get_backend(sub) == "hier"
    t = torch.full((1 << 16,), float(rank))
    dist.all_reduce(t, group=sub)
    assert torch.all(t == sum(mine)), t[:3]
    out = torch.empty(2 * 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)), group=sub)
    assert torch.equal(out, torch.tensor(mine).float().repeat_interleave(3))
    # A split of some ranks only: the others get no group and are not involved.
    odd = dist.split_group(split_ranks=[[1, 3]])
    if rank in (1, 3):
        t = torch.ones(4)
        dist.all_reduce(t, group=odd)
        assert torch.all(t == 2)
    else:
        assert odd is dist.GroupMember.NON_GROUP_MEMBER, odd
    # The parent goes on, in step.
    t = torch.ones(8)
    dist.all_reduce(t)
    assert torch.all(t == world)
    # A 2 x 2 device mesh and its dimensions' groups.
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        members = dist.get_process_group_ranks(group)
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=group)
        assert torch.all(t == sum(members)), (dim, members, t)
    return "ok"


def test_split_group_and_device_mesh_run_on_hier():
    assert run_job(4, case_split_group, timeout_s=30) == ["ok"] * 4


def case_gather_single():
    rank, world = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for dst in range(world):
            x = (torch.arange(6) + 10 * rank).to(dtype).reshape(2, 3)
            out = torch.empty(world, 2, 3, dtype=dtype) if rank == dst else None
            dist.gather_single(x, out, dst=dst)
            if rank == dst:
                expected = torch.stack([(torch.arange(6) + 10 * r).to(dtype).reshape(2, 3) for r in range(world)])
                assert torch.equal(out, expected), (dtype, dst, out)
    # A flat output, asynchronously, and an empty input.
    out = torch.empty(world * 4) if rank == 0 else None
    work = dist.gather_single(torch.full((4,), float(rank)), out, dst=0, async_op=True)
    work.wait()
    if rank == 0:
        assert torch.equal(out, torch.arange(world).float().repeat_interleave(4))
    dist.gather_single(torch.empty(0), torch.empty(0) if rank == 0 else None, dst=0)
    # The root's output has the wrong size: every rank raises, naming the root's reason; the group goes on.
    out = torch.empty(world * 4 + 1) if rank == 0 else None
    try:
        dist.gather_single(torch.ones(4), out, dst=0)
        raise AssertionError("gather_single took an output of the wrong size")
    except RuntimeError as e:
        assert "gather_single" in str(e) and "elements" in str(e), str(e)
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == world)
    return "ok"


@pytest.mark.skipif(not hasattr(dist, "gather_single"), reason=f"torch {torch.__version__} has no dist.gather_single")
def test_gather_single_fills_the_roots_one_output():
    assert run_job(3, case_gather_single, timeout_s=20) == ["ok"] * 3
