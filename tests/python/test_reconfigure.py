"""dist._reconfigure (torch 2.14 on): a hier group changes its members without being made again. The
members exchange their handles (dist._get_reconfigure_handle) through the store, as torch's own tests and
torchft do, then shrink, grow back in another order, renumber by a set, refuse bad calls and stay usable,
and go on after a member is killed. Every collective after a change is checked against the sum or the
order computed here from the new membership."""

import os
import signal
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from harness import TORCH_RELEASE, run_job

pytestmark = pytest.mark.skipif(
    TORCH_RELEASE < (2, 14), reason=f"dist._reconfigure came with torch 2.14; this is torch {torch.__version__}"
)
TIMEOUT = timedelta(seconds=30)


def _handles(tag):
    """Every rank's reconfigure handle, by its rank now, through the default group's store."""
    store = dist.distributed_c10d._get_default_store()
    store.set(f"{tag}/{dist.get_rank()}", dist._get_reconfigure_handle())
    return [store.get(f"{tag}/{r}").decode() for r in range(dist.get_world_size())]


def _check_members(members):
    """The group's members are `members` (first ranks, in their new order): size, rank, a sum, an
    allgather of who is where, and a send from the last member to the first."""
    first = members.index(FIRST_RANK[0])
    assert dist.get_world_size() == len(members) and dist.get_rank() == first, (dist.get_rank(), members)
    t = torch.full((1000,), float(FIRST_RANK[0]))
    dist.all_reduce(t)
    assert torch.all(t == sum(members)), t[0]
    where = [torch.zeros(1, dtype=torch.int64) for _ in members]
    dist.all_gather(where, torch.tensor([FIRST_RANK[0]]))
    assert [int(w) for w in where] == members
    if len(members) > 1:
        last = len(members) - 1
        box = torch.full((3,), float(FIRST_RANK[0]))
        if first == last:
            dist.send(box, dst=0)
        elif first == 0:
            dist.recv(box, src=last)
            assert torch.all(box == members[last])


FIRST_RANK = [None]  # the rank each process had when the job began


def case_members_change():
    FIRST_RANK[0] = rank = dist.get_rank()
    world = dist.get_world_size()
    assert dist._supports_reconfigure()
    handles = _handles("start")
    completed, aborted = [], []
    dist.group.WORLD._register_on_completion_hook(lambda info: completed.append(info.op_type))
    if TORCH_RELEASE >= (2, 15):
        dist.group.WORLD.register_abort_hook(1, lambda: aborted.append(1))

    # The middle rank leaves; the others close up.
    stay = [r for r in range(world) if r != 1]
    if rank in stay:
        dist._reconfigure(1, [handles[r] for r in stay], timeout=TIMEOUT).wait()
        _check_members(stay)
    # Everyone again, in reverse order: a list numbers the members by position.
    back = list(reversed(range(world)))
    dist._reconfigure(2, [handles[r] for r in back], timeout=TIMEOUT).wait()
    _check_members(back)
    # A set: hier numbers the members in the handles' sorted order, on every rank alike.
    dist._reconfigure(3, set(handles), timeout=TIMEOUT).wait()
    _check_members(sorted(range(world), key=lambda r: handles[r]))

    errors = {}
    for what, uuid, listed in (
        ("reused uuid", 2, handles),
        ("without this rank", 4, [h for h in handles if h != handles[rank]]),
        ("twice", 5, handles + handles[:1]),
        ("not hier's", 6, ["gloo:0:1:2:host:1234"]),
        ("none", 7, []),
    ):
        try:
            dist._reconfigure(uuid, listed, timeout=TIMEOUT).wait()
            raise AssertionError(f"reconfigure {what} succeeded")
        except RuntimeError as e:
            errors[what] = str(e).split("\nException raised from")[0]
    # The refusals left the group as it was; the hooks registered before the reconfigures serve it still.
    heard = len(completed)
    _check_members(sorted(range(world), key=lambda r: handles[r]))
    dist.group.WORLD._wait_for_pending_works()  # the completion hook has run for all of them
    assert len(completed) > heard, "the completion hook registered first heard nothing after the reconfigures"
    assert not aborted, "a reconfigure ran the abort hooks"
    # A group made after the reconfigures numbers its ranks as the default group does now.
    group = dist.new_group(list(range(world)))
    mine, theirs = torch.tensor([FIRST_RANK[0]]), torch.zeros(world, dtype=torch.int64)
    dist.all_gather_into_tensor(theirs, mine, group=group)
    expected = torch.zeros(world, dtype=torch.int64)
    dist.all_gather_into_tensor(expected, mine)
    assert torch.equal(theirs, expected), (theirs, expected)
    return errors


def test_members_leave_come_back_and_are_renumbered():
    errors = run_job(4, case_members_change, timeout_s=120)
    for e in errors:
        assert "was used before" in e["reused uuid"] and "uuid 2" in e["reused uuid"]
        assert "is not among the 3 given" in e["without this rank"]
        assert "is listed twice" in e["twice"]
        assert "is not a hier group's handle" in e["not hier's"]
        assert "no handles given" in e["none"]
        assert all("reconfigure of group" in text for text in e.values()), e


def case_go_on_without_a_killed_rank(victim):
    FIRST_RANK[0] = rank = dist.get_rank()
    world = dist.get_world_size()
    handles = _handles("start")
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        dist.all_reduce(t)
        raise AssertionError("an allreduce without the killed rank succeeded")
    except dist.DistBackendError:
        pass
    survivors = [r for r in range(world) if r != victim]
    dist._reconfigure(11, [handles[r] for r in survivors], timeout=TIMEOUT).wait()
    _check_members(survivors)
    return "went on"


def test_survivors_reconfigure_without_a_killed_rank_and_go_on():
    results = run_job(3, case_go_on_without_a_killed_rank, 1, timeout_s=120, may_exit={1})
    assert results == ["went on", "exited", "went on"], results


def case_a_listed_member_that_never_comes():
    FIRST_RANK[0] = rank = dist.get_rank()
    world = dist.get_world_size()
    handles = _handles("start")
    error = None
    if rank != world - 1:  # the last rank is listed but does not call
        try:
            dist._reconfigure(21, handles, timeout=timedelta(seconds=2)).wait()
            raise AssertionError("a reconfigure without one listed member succeeded")
        except RuntimeError as e:
            error = str(e).split("\nException raised from")[0]
        try:  # the same uuid again would meet the failed call's keys
            dist._reconfigure(21, handles, timeout=timedelta(seconds=2)).wait()
            raise AssertionError("a reconfigure retried with the failed call's uuid was not refused")
        except RuntimeError as e:
            assert "uuid 21 was used before" in str(e), e
    # Every rank kept the group it had.
    _check_members(list(range(world)))
    return error


def test_a_listed_member_that_never_comes_fails_the_call_and_the_group_stays():
    results = run_job(3, case_a_listed_member_that_never_comes, timeout_s=120)
    for error in results[:2]:
        assert "2 of the 3 members arrived within 2000 ms" in error and "uuid 21" in error, error
        assert "retry with a fresh uuid" in error, error
    assert results[2] is None
