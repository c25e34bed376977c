"""Peers that never arrive or die: the others fail within the deadline, with the missing ranks named.

Every test here breaks its group on purpose, so each runs in a job of its own.
"""

import os
import signal
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from harness import TORCH_RELEASE, run_job

TIMEOUT_S = 3
# The deadline, plus the short wait in which the failing ranks ask each other who arrived, plus
# scheduling slack on a loaded two-core box.
LIMIT_S = TIMEOUT_S + 2 + 2


def _expect_failure(fn, *fragments, started=None):
    """The text of the error `fn` fails with, within the limit from `started` (default: now)."""
    start = time.monotonic() if started is None else started
    try:
        fn()
    except dist.DistBackendError as e:
        took = time.monotonic() - start
        text = str(e).split("\nException raised from")[0]
        assert took < LIMIT_S, f"failed after {took:.1f} s, beyond the {TIMEOUT_S} s deadline: {text}"
        for fragment in fragments:
            assert fragment in text, f"expected '{fragment}' in: {text}"
        return text
    raise AssertionError("the operation succeeded although a peer was missing")


ABSENT_OPS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "gather",
              "allreduce_shared_memory"]


def _issue(op, group, rank, world, big):
    """`op` on `group`, asynchronous: its Work."""
    t = torch.ones(1000)
    if op == "allreduce":
        return dist.all_reduce(t, group=group, async_op=True)
    if op == "broadcast":
        return dist.broadcast(t, src=world - 1, group=group, async_op=True)  # from the absent rank
    if op == "allgather":
        return dist.all_gather_into_tensor(torch.empty(1000 * world), t, group=group, async_op=True)
    if op == "reduce_scatter":
        return dist.reduce_scatter_tensor(torch.empty(10), torch.ones(10 * world), group=group, async_op=True)
    if op == "alltoall":
        return dist.all_to_all_single(torch.empty(world * 4), torch.ones(world * 4), group=group, async_op=True)
    if op == "barrier":
        return dist.barrier(group=group, async_op=True)
    if op == "gather":
        gathered = [torch.empty(1000) for _ in range(world)] if rank == 0 else None
        return dist.gather(t, gathered, dst=0, group=group, async_op=True)
    return dist.all_reduce(big, group=group, async_op=True)  # allreduce_shared_memory


def case_absent_rank():
    """Every collective at once, each on a group of its own (all three ranks; groups fail independently);
    the last rank is in every group and never comes to any collective."""
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {op: dist.new_group(list(range(world)), timeout=timedelta(seconds=TIMEOUT_S)) for op in ABSENT_OPS}
    big = torch.ones(1 << 18)  # 1 MiB: through the shared-memory arena of the host
    # Every rank sets that group's arena up; then one rank stops coming.
    dist.all_reduce(big, group=groups["allreduce_shared_memory"])
    store = dist.distributed_c10d._get_default_store()
    if rank == world - 1:
        # In the groups, never in their collectives, until the others are done (or long after they should be).
        until = time.monotonic() + 3 * LIMIT_S
        while store.add("absent-rank-done", 0) < world - 1 and time.monotonic() < until:
            time.sleep(0.05)
        return None
    try:
        return _absent_rank_seen_by_the_others(groups, rank, world, big)
    finally:
        store.add("absent-rank-done", 1)


def _absent_rank_seen_by_the_others(groups, rank, world, big):
    started = time.monotonic()
    works = {op: _issue(op, group, rank, world, big) for op, group in groups.items()}
    texts = {}
    for op, work in works.items():
        if rank != 0 and op == "gather":
            # Rank 1 only sends to the root here: it may finish its part (an eager send) or fail.
            try:
                work.wait()
                texts[op] = "done"
            except dist.DistBackendError:
                texts[op] = "failed"
            continue
        text = texts[op] = _expect_failure(work.wait, "timed out after", started=started)
        if rank == 0:
            # Rank 0 names the absent rank itself (nobody else reported in time), or learns first from rank
            # 1's failure notice, which names it as the rank rank 1 waited for: the two time out together.
            silent = text.split("no report within")[1] if "no report within" in text else ""
            notice = text.split("failed on rank 1:")[1] if "failed on rank 1:" in text else ""
            assert f"{world - 1} (not arrived" in silent or f"waiting for rank {world - 1}" in notice, (op, text)
    # The group would go on if every rank came to its next operation (test_recovery.py); the absent rank
    # does not: the next operation fails within its deadline naming it, and the group is unusable from
    # then on, which every later call says at once.
    started = time.monotonic()
    nexts = {op: dist.all_reduce(torch.ones(1), group=group, async_op=True) for op, group in groups.items()}
    for op, work in nexts.items():
        _expect_failure(work.wait, f"{world - 1} did not come back", started=started)
    for op, group in groups.items():
        started = time.monotonic()
        _expect_failure(lambda: dist.all_reduce(torch.ones(1), group=group), "unusable after an earlier failure")
        assert time.monotonic() - started < 1.0, op
    return texts


def test_every_collective_fails_in_time_and_names_the_rank_that_never_came():
    results = run_job(3, case_absent_rank, timeout_s=60)
    assert all(set(r) == set(ABSENT_OPS) for r in results[:2]), results


def case_one_rank_fails_first():
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    t = torch.ones(1 << 16)
    if rank == world - 1:
        time.sleep(4)  # late, well within the group's 60 s deadline
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except dist.DistBackendError as e:
            assert time.monotonic() - start < 1.0
            return str(e).split("\nException raised from")[0]
        raise AssertionError("the late rank's allreduce succeeded after the others failed it")
    # Rank 0 gives this one collective a 1 s deadline; rank 1 has the group's 60 s. Rank 0's timeout must
    # reach rank 1 at once (a failure notice), not after rank 1's own 60 s.
    opts = dist.AllreduceOptions()
    if rank == 0:
        opts.timeout = timedelta(seconds=1)
    start = time.monotonic()
    try:
        pg.allreduce([t], opts).wait()
    except dist.DistBackendError as e:
        took = time.monotonic() - start
        text = str(e).split("\nException raised from")[0]
        assert took < 3.0, f"rank {rank} failed after {took:.1f} s: {text}"
        if rank != 0:
            assert "failed on rank 0" in text and "timed out" in text, text
        return text
    raise AssertionError(f"rank {rank}: the allreduce succeeded without rank {world - 1}")


def test_a_rank_that_fails_tells_the_others_at_once():
    texts = run_job(3, case_one_rank_fails_first, timeout_s=60)
    assert "failed on rank 0" in texts[1]


def case_notice_reaches_a_rank_in_shared_memory():
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    # 1 GiB a rank: through the shared-memory arena, in chunks, for a few hundred milliseconds on two
    # cores, so the ranks are well inside it (past the agreement, which takes microseconds) when the last
    # one stops 20 ms in. (At 256 MiB the operation could end before the stop.)
    big = torch.full((1 << 28,), float(rank + 1))
    opts = dist.AllreduceOptions()
    if rank == 0:
        opts.timeout = timedelta(seconds=1)
    dist.barrier()
    if rank == world - 1:
        # Stopped mid-collective (SIGSTOP, by a child: a stopped process cannot wake itself), continued
        # after the others have failed: ranks 0 and 1 sit in a shared-memory wait for its counters.
        import subprocess

        pid = os.getpid()
        subprocess.Popen(["sh", "-c", f"sleep 0.02; kill -STOP {pid}; sleep 3; kill -CONT {pid}"])
    start = time.monotonic()
    try:
        pg.allreduce([big], opts).wait()
    except dist.DistBackendError as e:
        took = time.monotonic() - start
        text = str(e).split("\nException raised from")[0]
        if rank == 1:
            # Its own deadline is the group's 60 s: only rank 0's notice, reaching it inside the arena's
            # wait, ends its wait this early.
            assert took < 2.5, f"rank 1 failed after {took:.1f} s: {text}"
            assert "failed on rank 0" in text and "timed out" in text, text
    else:
        raise AssertionError(f"rank {rank}: the allreduce succeeded although rank {world - 1} was stopped in it")
    # Every rank failed the same operation: the group goes on.
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.all(t == world * (world + 1) / 2), t
    return took, text


def test_a_failure_notice_reaches_a_rank_waiting_in_shared_memory():
    results = run_job(3, case_notice_reaches_a_rank_in_shared_memory, timeout_s=60)
    took, text = results[1]
    print(f"rank 1 failed {took:.2f} s after the call (rank 0's timeout: 1 s): {text[:200]}")
    assert "failed on rank 0" in text


def case_receive_from_silent_peer():
    if dist.get_rank() == 1:
        time.sleep(TIMEOUT_S + 1.5)
    else:
        work = dist.irecv(torch.empty(10), src=1, tag=4)
        _expect_failure(work.wait, "recv", "no matching message within the deadline")
    # A point-to-point failure leaves the group usable for collectives.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == 2)


def test_receive_from_a_silent_peer_times_out():
    run_job(2, case_receive_from_silent_peer, timeout_s=TIMEOUT_S)


def case_killed_mid_collective():
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1 << 18)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == world - 1:
        os._exit(17)  # dies without a word, between two collectives
    text = _expect_failure(lambda: dist.all_reduce(t))
    if rank == 0:
        assert f"rank {world - 1}" in text, text
    return text


def test_a_rank_killed_mid_job_fails_the_others_in_time():
    results = run_job(3, case_killed_mid_collective, timeout_s=TIMEOUT_S, may_exit={2})
    assert results[2] == "exited"


def case_killed_on_this_host():
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1 << 18)  # 1 MiB: through the ranks' shared-memory arena
    for _ in range(3):
        dist.all_reduce(t)
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        took = time.monotonic() - start
        text = str(e).split("\nException raised from")[0]
        # The group's deadline is 60 s: only the arena's watch on its peers' processes ends the wait this
        # early (plus the second or two in which the failing ranks ask each other who arrived).
        assert took < 5.0, f"rank {rank} failed after {took:.1f} s: {text}"
        assert f"rank {world - 1}'s process ended" in text, text
        # Seen gone (by this rank, or by the other survivor, whose notice says so): nobody waits for its
        # report in the failure's account.
        assert f"rank {world - 1} gone (" in text and "no report within" not in text, text
        return took, text
    raise AssertionError(f"rank {rank}: the allreduce succeeded without rank {world - 1}")


def test_a_rank_killed_on_the_same_host_is_found_long_before_the_deadline():
    results = run_job(3, case_killed_on_this_host, timeout_s=60, may_exit={2})
    assert results[2] == "exited"
    for rank in (0, 1):
        took, text = results[rank]
        print(f"rank {rank} failed {took:.2f} s after the call (deadline 60 s): {text[:200]}")


def case_receive_from_a_rank_killed_on_this_host():
    rank = dist.get_rank()
    t = torch.ones(256)
    # Rank 0 only receives; rank 1 is killed once rank 0 has (the barrier), so that rank 0's first
    # receive found it there.
    if rank == 1:
        dist.send(t, dst=0)
        dist.barrier()
        os.kill(os.getpid(), signal.SIGKILL)
    dist.recv(t, src=1)
    dist.barrier()
    start = time.monotonic()
    try:
        dist.recv(t, src=1)
    except dist.DistBackendError as e:
        took = time.monotonic() - start
        text = str(e).split("\nException raised from")[0]
        # UCX carries the message and does not watch peers on one machine: only the engine's watch on the
        # peer's process ends the wait before the group's 60 s deadline.
        assert took < 5.0, f"the receive failed after {took:.1f} s: {text}"
        assert "process ended" in text and "peer 1" in text, text
        return took, text
    raise AssertionError("the receive succeeded from a rank that was killed")


def test_a_receive_from_a_rank_killed_on_the_same_host_fails_long_before_the_deadline():
    results = run_job(2, case_receive_from_a_rank_killed_on_this_host, timeout_s=60, may_exit={1})
    assert results[1] == "exited"
    took, text = results[0]
    print(f"rank 0 failed {took:.2f} s after the call (deadline 60 s): {text[:200]}")


def case_abort_from_another_thread():
    import threading

    rank, world = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group(list(range(world)), backend="hier", timeout=timedelta(seconds=60))
    if rank == world - 1:
        time.sleep(3)  # never joins the subgroup's collectives; then meets the others on the world group
    else:
        # Queued behind one another, all waiting for the absent rank under a 60 s deadline.
        works = [dist.all_reduce(torch.ones(1 << 12), group=sub, async_op=True) for _ in range(4)]
        took = {}

        def abort():
            start = time.monotonic()
            sub.abort()
            took["abort"] = time.monotonic() - start

        thread = threading.Thread(target=abort)
        time.sleep(0.5)
        start = time.monotonic()
        thread.start()
        for work in works:
            try:
                work.wait()
                raise AssertionError("a pending allreduce succeeded on an aborted group")
            except dist.DistBackendError as e:
                assert "aborted" in str(e), e
        waited = time.monotonic() - start
        thread.join()
        assert took["abort"] < 1.0, f"abort() took {took['abort']:.2f} s"
        assert waited < 1.0, f"the pending work failed {waited:.2f} s after abort()"
        try:
            dist.all_reduce(torch.ones(1), group=sub)
            raise AssertionError("an aborted group took a new collective")
        except (dist.DistBackendError, RuntimeError) as e:
            assert "aborted" in str(e), e
    # The process is healthy: the world group goes on.
    t = torch.ones(5)
    dist.all_reduce(t)
    assert torch.all(t == world)
    return "ok"


def test_abort_from_another_thread_cancels_pending_work_within_a_second():
    assert run_job(3, case_abort_from_another_thread, timeout_s=30) == ["ok"] * 3


def case_ephemeral_timeout(late_s):
    """torch's _add_ephemeral_timeout: the operations issued after it get the extra time until the first of
    them finished. Rank 1 comes `late_s` late, beyond the group's timeout: the first operation after the
    extension succeeds; the extension then ends, and the next late arrival fails."""
    rank = dist.get_rank()
    group = dist.new_group(backend="hier", timeout=timedelta(seconds=TIMEOUT_S))
    t = torch.ones(100)
    dist.all_reduce(t, group=group)
    group._add_ephemeral_timeout(timedelta(seconds=2 * late_s))
    if rank == 1:
        time.sleep(late_s)
    dist.all_reduce(t, group=group)
    assert torch.all(t == 4), t[:4]
    if rank == 1:
        time.sleep(late_s)
    try:
        dist.all_reduce(t, group=group)  # on the late rank, the others' failure reaches it
        raise AssertionError("the extension outlived the first operation after it")
    except dist.DistBackendError as e:
        assert rank == 1 or "timed out" in str(e), e
    return "extended once"


@pytest.mark.skipif(TORCH_RELEASE < (2, 15), reason="hier overrides Backend.addEphemeralTimeout from torch 2.15 on")
def test_an_ephemeral_timeout_extends_the_operations_until_the_first_finished():
    results = run_job(2, case_ephemeral_timeout, TIMEOUT_S + 1.5, timeout_s=60)
    assert results[0] == "extended once", results


def case_abort_hooks():
    """torch's register_abort_hook: a hook runs before the group fails for a failure in flight (here a
    rank that comes too late), on every rank that fails; unregistered, it does not."""
    rank = dist.get_rank()
    group = dist.new_group(backend="hier", timeout=timedelta(seconds=TIMEOUT_S))
    assert group.supports_abort_hooks
    ran = []
    group.register_abort_hook(7, lambda: ran.append("hook 7"))
    t = torch.ones(100)
    dist.all_reduce(t, group=group)
    assert ran == [], ran  # nothing failed
    if rank == 1:
        time.sleep(TIMEOUT_S + 1.5)
    try:
        dist.all_reduce(t, group=group)
        raise AssertionError("an allreduce with a rank past the deadline succeeded")
    except dist.DistBackendError:
        pass
    assert "hook 7" in ran, f"rank {rank}: the abort hook did not run before the failure was raised"
    group.register_abort_hook(8, lambda: ran.append("hook 8"))
    group.unregister_abort_hook(7)
    ran.clear()
    group.abort()
    assert ran and set(ran) == {"hook 8"}, ran
    return "ok"


@pytest.mark.skipif(TORCH_RELEASE < (2, 15), reason="hier overrides the abort hooks from torch 2.15 on")
def test_abort_hooks_run_before_a_failure_and_an_abort():
    assert run_job(2, case_abort_hooks, timeout_s=60) == ["ok", "ok"]
