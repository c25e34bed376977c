"""torch's shrink_group on hier: after a rank is killed, the survivors learn it within the deadline, shrink
the group without it, and the smaller group's collectives are right (checked against local references).
Every test kills a rank, so each runs in a job of its own."""

import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from harness import run_job

TIMEOUT_S = 5


def _check_collectives(pg, global_ranks):
    """Every card collective on ``pg`` against what the ranks listed (global ranks, in group order) give."""
    rank, world = pg.rank(), pg.size()
    me = global_ranks[rank]

    t = torch.arange(1001, dtype=torch.float64) * (me + 1)
    dist.all_reduce(t, group=pg)
    assert torch.equal(t, torch.arange(1001, dtype=torch.float64) * sum(g + 1 for g in global_ranks))

    out = torch.empty(world * 7, dtype=torch.int32)
    dist.all_gather_into_tensor(out, torch.full((7,), me, dtype=torch.int32), group=pg)
    assert torch.equal(out, torch.tensor(global_ranks, dtype=torch.int32).repeat_interleave(7))

    b = torch.full((33,), float(me)) if rank == world - 1 else torch.zeros(33)
    dist.broadcast(b, group_src=world - 1, group=pg)
    assert torch.all(b == global_ranks[-1])

    rs = torch.empty(5, dtype=torch.int64)
    dist.reduce_scatter_tensor(rs, torch.arange(5 * world, dtype=torch.int64) + me, group=pg)
    assert torch.equal(rs, torch.arange(5 * rank, 5 * rank + 5, dtype=torch.int64) * world + sum(global_ranks))

    a2a = torch.empty(world * 3)
    dist.all_to_all_single(a2a, torch.full((world * 3,), float(me)), group=pg)
    assert torch.equal(a2a, torch.tensor(global_ranks, dtype=torch.float32).repeat_interleave(3))
    dist.barrier(group=pg)


def case_shrink_after_a_death(victim):
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1 << 16)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        raise AssertionError("an allreduce without the killed rank succeeded")
    except dist.DistBackendError as e:
        text = str(e).split("\nException raised from")[0]
    took = time.monotonic() - start
    assert took < TIMEOUT_S + 4, f"the survivors learned of the death after {took:.1f} s: {text}"

    small = dist.shrink_group([victim])
    survivors = [r for r in range(world) if r != victim]
    assert small.size() == world - 1 and small.rank() == survivors.index(rank)
    assert dist.get_world_size() == world - 1, "shrinking the default group makes the new one the default"
    _check_collectives(small, survivors)
    return text


def test_survivors_shrink_the_world_after_a_rank_is_killed_and_go_on():
    # A middle rank dies: the survivors' ranks close up (3 -> 2) and the collectives use the new numbering.
    results = run_job(4, case_shrink_after_a_death, 2, timeout_s=TIMEOUT_S, may_exit={2})
    assert results[2] == "exited"
    assert all(isinstance(r, str) for r in (results[0], results[1], results[3])), results


def case_shrink_a_subgroup(victim):
    rank, world = dist.get_rank(), dist.get_world_size()
    members = list(range(1, world))  # a subgroup without rank 0, on which the job goes on
    sub = dist.new_group(members, backend="hier", timeout=timedelta(seconds=TIMEOUT_S))
    x = torch.ones(100)
    if rank in members:
        dist.all_reduce(x, group=sub)
        assert torch.all(x == len(members))
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    if rank not in members:
        return "outside"
    try:
        dist.all_reduce(x, group=sub)
        raise AssertionError("an allreduce without the killed rank succeeded")
    except dist.DistBackendError:
        pass
    group_victim = members.index(victim)
    small = dist.shrink_group([group_victim], group=sub, shrink_flags=distributed_c10d.SHRINK_ABORT)
    survivors = [r for r in members if r != victim]
    assert small.size() == len(survivors)
    assert small.rank() == survivors.index(rank)
    # torch (2.11 to 2.15) registers the shrunk subgroup's global ranks by dropping the excluded *group*
    # ranks from the *global* rank list (distributed_c10d._finalize_shrunk_group), so its registry says
    # [1, 3, 4] here; hier's group itself holds the right ranks, which the collectives below check.
    _check_collectives(small, survivors)
    return "shrunk"


def test_survivors_shrink_a_subgroup_after_a_member_is_killed():
    # 5 ranks, the subgroup {1, 2, 3, 4} loses rank 3; the world group is left as it is.
    results = run_job(5, case_shrink_a_subgroup, 3, timeout_s=TIMEOUT_S, may_exit={3})
    assert results == ["outside", "shrunk", "shrunk", "exited", "shrunk"], results


def case_shrink_refuses_an_excluded_caller():
    rank = dist.get_rank()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.supports_shrinking
    try:
        backend.shrink([rank], 0, None)
    except RuntimeError as e:
        assert "is excluded and must not take part" in str(e), e
        return "refused"
    raise AssertionError("a rank shrank a group that excludes it")


def test_an_excluded_rank_cannot_shrink():
    assert run_job(2, case_shrink_refuses_an_excluded_caller) == ["refused", "refused"]
