"""The Work objects hier returns: waiting, polling, futures, results, timeouts on wait()."""

import datetime
import time

import torch
import torch.distributed as dist

from harness import TORCH_RELEASE, run_job

# Work.exception() reaches Python from torch 2.13 on: 2.11 and 2.12 bind it with no converter for
# std::exception_ptr, so it raises TypeError for every backend (Gloo's works included).
WORK_EXCEPTION_BOUND = TORCH_RELEASE >= (2, 13)


def case_work_api():
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1 << 16,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert work.is_completed() and work.is_success()
    assert not WORK_EXCEPTION_BOUND or work.exception() is None
    expected = float(sum(range(world)))
    assert torch.all(t == expected)
    # result() and the future hold the output tensors; the future also chains, as DDP's hooks do.
    assert torch.equal(work.result()[0], t)
    fut = work.get_future()
    assert torch.equal(fut.wait()[0], t)
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    assert torch.all(doubled == 2 * expected)
    # The future of an operation not finished yet completes when it does.
    t2 = torch.ones(10)
    fut2 = dist.all_reduce(t2, async_op=True).get_future()
    assert torch.all(fut2.wait()[0] == world)
    # Blocking calls return a finished result.
    t3 = torch.ones(3)
    assert dist.all_reduce(t3, async_op=False) is None
    assert torch.all(t3 == world)
    # Point-to-point works have futures too.
    if world > 1:
        if rank == 0:
            w = dist.isend(torch.arange(5.0), 1)
            assert torch.equal(w.get_future().wait()[0], torch.arange(5.0))
        elif rank == 1:
            buf = torch.empty(5)
            w = dist.irecv(buf, 0)
            assert torch.equal(w.get_future().wait()[0], torch.arange(5.0))
            # The future completes first, then the work (Gloo's order): once wait() returns, both are.
            w.wait()
            assert w.is_completed() and w.get_future().done()


def test_work_api(pools):
    pools(2).run(case_work_api)
    pools(3).run(case_work_api)


def case_wait_with_timeout():
    rank = dist.get_rank()
    t = torch.ones(100)
    if rank == 1:
        time.sleep(1.5)  # rank 0's wait(timeout) gives up before this rank arrives
        dist.all_reduce(t)
        return
    work = dist.all_reduce(t, async_op=True)
    assert not work.is_completed()
    start = time.monotonic()
    try:
        work.wait(timeout=datetime.timedelta(milliseconds=200))
        raise AssertionError("wait(200 ms) returned although the peer was 1.5 s away")
    except RuntimeError as e:
        assert "wait() gave up after 200 ms" in str(e), str(e)
    assert time.monotonic() - start < 1.0
    # The operation itself goes on and completes when the peer arrives.
    work.wait()
    assert torch.all(t == 2)


def test_wait_with_a_timeout_gives_up_but_the_operation_continues(pools):
    pools(2).run(case_wait_with_timeout)


def case_many_in_flight_across_groups():
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = [dist.new_group(list(range(world))) for _ in range(3)]
    works, tensors = [], []
    for i in range(30):
        t = torch.full((257 * (i + 1),), float(rank * 10 + i))
        works.append(dist.all_reduce(t, group=groups[i % 3], async_op=True))
        tensors.append(t)
    for w in works:
        w.wait()
    for i, t in enumerate(tensors):
        assert torch.all(t == sum(r * 10 + i for r in range(world))), i
    for g in groups:
        dist.destroy_process_group(g)


def test_many_operations_in_flight_on_several_groups(pools):
    pools(3).run(case_many_in_flight_across_groups)


def case_waiting_runs_queued_operations_in_order():
    # A thread that waits for a queued operation runs it, and those queued ahead of it, itself; the
    # group's own thread runs whatever is left. Either way the operations run one at a time in the order
    # they were issued: on the same tensor, SUM then PRODUCT gives another value than the other way round,
    # and operations of different sizes run out of order on one rank would not agree with the others.
    import threading

    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)], dtype=torch.float64)
    chain = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT]
    works = [dist.all_reduce(t, op=op, async_op=True) for op in chain]
    works[-1].wait()  # the last first
    assert all(w.is_completed() for w in works)
    expected = float(sum(range(1, world + 1)))
    for op in chain[1:]:
        expected = expected**world if op == dist.ReduceOp.PRODUCT else expected * world
    assert t.item() == expected, (t.item(), expected)

    tensors = [torch.full((97 * (i + 1),), float(rank + i)) for i in range(24)]
    works = [dist.all_reduce(x, async_op=True) for x in tensors]
    # A blocking call behind queued ones waits its turn (and may run the queue itself).
    behind = torch.full((5,), float(rank))
    dist.all_reduce(behind)
    assert torch.all(behind == sum(range(world)))
    more = [torch.full((89 * (i + 1),), float(rank * i)) for i in range(24)]
    works += [dist.all_reduce(x, async_op=True) for x in more]
    # Two threads wait at once, each from the back of its half: whichever gets the queue first runs it.
    halves = (works[:24], works[24:])
    waiters = [threading.Thread(target=lambda ws=ws: [w.wait() for w in reversed(ws)]) for ws in halves]
    for w in waiters:
        w.start()
    for w in waiters:
        w.join()
    assert all(w.is_completed() and w.is_success() for w in works)
    for i, x in enumerate(tensors):
        assert torch.all(x == sum(r + i for r in range(world))), i
    for i, x in enumerate(more):
        assert torch.all(x == sum(r * i for r in range(world))), i
    return "ok"


def test_waiting_runs_queued_operations_in_order(pools):
    for world in (1, 2, 3):
        assert pools(world).run(case_waiting_runs_queued_operations_in_order) == ["ok"] * world


def case_finished_work_lets_go_of_its_tensors():
    import gc
    import weakref

    rank, world = dist.get_rank(), dist.get_world_size()
    refs = []
    for async_op in (False, True):
        sent, received = torch.ones(1 << 16), torch.empty(1 << 16)
        works = [dist.isend(sent, (rank + 1) % world), dist.irecv(received, (rank - 1) % world)]
        for w in works:
            w.wait()
        t = torch.ones(1 << 16)
        reduced = dist.all_reduce(t, async_op=async_op)
        if async_op:
            reduced.wait()
        refs += [weakref.ref(x) for x in (sent, received, t)]
        del sent, received, t, works, w, reduced
    # What hier's own threads let go of (here the group's thread, if it had the last reference to the
    # work) goes at the next call into hier (held_tensors.hpp).
    dist.barrier()
    gc.collect()
    # Nothing of hier's may hold a finished operation's tensors (a point-to-point work and its transfer
    # once kept each other alive, and every tensor sent or received with them).
    alive = [i for i, r in enumerate(refs) if r() is not None]
    assert not alive, f"tensors {alive} outlived their finished operations"
    return "ok"


def test_finished_work_lets_go_of_its_tensors(pools):
    assert pools(2).run(case_finished_work_lets_go_of_its_tensors) == ["ok", "ok"]


def case_a_temporary_is_let_go_of_on_the_callers_thread():
    import threading

    # A tensor subclass whose Python object says on which thread it was freed. Passed as a temporary, its
    # Python object dies at once, kept alive by hier's reference; freeing it takes the GIL, which one of
    # hier's own threads must never ask for (a wait for the caller's Python, and, while the interpreter
    # shuts down, an abort: held_tensors.hpp).
    freed = []

    class Tracked(torch.Tensor):
        def __del__(self):
            freed.append(threading.current_thread().name)

    rank, world = dist.get_rank(), dist.get_world_size()
    n = 1 << 12
    expected = 0
    for async_op in (True, False):
        work = dist.all_to_all_single(torch.empty(n).as_subclass(Tracked), torch.ones(n).as_subclass(Tracked),
                                      async_op=async_op)
        if async_op:
            time.sleep(0.2)  # the group's thread runs it, not wait()
            work.wait()
            # The input is let go of before wait() returns, on this thread; the output is the work's result.
            expected += 1
            assert freed == ["MainThread"] * expected, freed
        del work
        expected += 1 if async_op else 2
        dist.barrier()  # what hier's threads deferred goes at the next call
        assert freed == ["MainThread"] * expected, freed
    works = [dist.isend(torch.ones(n).as_subclass(Tracked), (rank + 1) % world),
             dist.irecv(torch.empty(n).as_subclass(Tracked), (rank - 1) % world)]
    time.sleep(0.2)  # UCX's progress thread may finish them
    for w in works:
        w.wait()
    del works, w
    dist.barrier()
    assert freed == ["MainThread"] * (expected + 2), freed
    return "ok"


def test_a_temporary_is_let_go_of_on_the_callers_thread(pools):
    assert pools(2).run(case_a_temporary_is_let_go_of_on_the_callers_thread) == ["ok", "ok"]


def case_future_result():
    from torch._C._distributed_c10d import WorkResult

    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    t = torch.full((1000,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    assert WorkResult(work.get_future_result().wait()) == WorkResult.SUCCESS
    assert torch.all(t == sum(range(world)))
    # A collective whose deadline passes on rank 0 (TIMEOUT there); the others learn it from rank 0 and
    # fail it too (COMM_ERROR). The future never raises.
    opts = dist.AllreduceOptions()
    if rank == 0:
        opts.timeout = datetime.timedelta(milliseconds=500)
    else:
        time.sleep(1.5)
    work = pg.allreduce([torch.ones(10)], opts)
    expected = WorkResult.TIMEOUT if rank == 0 else WorkResult.COMM_ERROR
    assert WorkResult(work.get_future_result().wait()) == expected
    # The group goes on.
    t = torch.ones(5)
    dist.all_reduce(t)
    assert torch.all(t == world)
    # Point-to-point works too: a receive that times out, and one that succeeds.
    if rank == 0:
        got = torch.empty(4)
        late = dist.irecv(torch.empty(4), src=1, tag=9)
        assert WorkResult(late.get_future_result().wait()) == WorkResult.TIMEOUT
        ok = dist.irecv(got, src=1, tag=10)
        assert WorkResult(ok.get_future_result().wait()) == WorkResult.SUCCESS
        assert torch.all(got == 7)
    elif rank == 1:
        dist.send(torch.full((4,), 7.0), dst=0, tag=10)
    return "ok"


def test_get_future_result_says_how_each_operation_ended():
    # A job of its own: it fails a collective on purpose. Point-to-point deadlines are the group's: 2 s.
    assert run_job(3, case_future_result, timeout_s=2) == ["ok"] * 3


def _completion_order(group, rounds):
    """What a caller can see of a work's completion, in the order it can see it, on `group`: the same
    calls give the same answers on Gloo and on hier."""
    rank, world = dist.get_rank(), dist.get_world_size()
    seen = []
    for i in range(rounds):
        # The future asked for after wait() (torchft does so): complete, and then() runs at once.
        t = torch.full((8,), float(rank + i))
        work = dist.all_reduce(t, group=group, async_op=True)
        work.wait()
        fut = work.get_future()
        ran = []
        fut.then(lambda f: ran.append(f.value()[0].clone()))
        seen.append(("asked after wait", fut.done(), len(ran), work.is_completed(), bool(ran) and torch.equal(ran[0], t)))
        # The future asked for first, waited for through the work.
        work = dist.all_reduce(t, group=group, async_op=True)
        fut = work.get_future()
        work.wait()
        seen.append(("asked before wait", fut.done(), work.is_completed(), torch.equal(fut.value()[0], t)))
    # A callback attached while the work runs sees it not yet completed: the future completes first, then
    # waiters wake and is_completed() turns true. Only rank 0 is sure to attach it while the work runs
    # (rank 1 comes late, and its work may be done before its then() is attached, on either backend).
    if rank == 1:
        time.sleep(0.3)
    t = torch.ones(4)
    work = dist.all_reduce(t, group=group, async_op=True)
    inside = []

    def look(f):
        inside.append(work.is_completed())
        inside.append(torch.equal(work.result()[0], f.value()[0]))
        if WORK_EXCEPTION_BOUND:
            inside.append(work.exception() is None)

    work.get_future().then(look)
    work.wait()
    after = [work.is_completed(), torch.equal(work.result()[0], t)]
    if WORK_EXCEPTION_BOUND:
        after.append(work.exception() is None)
    seen.append(("callback while running", rank, inside if rank == 0 else None, after))
    return seen


def case_completion_order_matches_gloo():
    gloo = dist.new_group(backend="gloo")
    expected = _completion_order(gloo, rounds=20)
    got = _completion_order(dist.group.WORLD, rounds=200)
    dist.destroy_process_group(gloo)
    problems = [f"hier: {g}" for g in got if g not in expected]
    assert not problems, "Gloo saw:\n  " + "\n  ".join(map(str, sorted(set(map(str, expected))))) + "\n" + "\n".join(problems[:10])
    return "ok"


def test_completion_is_seen_in_gloos_order(pools):
    assert pools(2).run(case_completion_order_matches_gloo) == ["ok", "ok"]


def case_failed_work_fails_its_future_first():
    # Ranks that disagree (different sizes) fail the call everywhere; the group goes on.
    rank, world = dist.get_rank(), dist.get_world_size()
    for _ in range(50):
        work = dist.all_reduce(torch.ones(3 if rank == 0 else 2), async_op=True)
        try:
            work.wait()
            raise AssertionError("ranks that disagree got no error")
        except RuntimeError as e:
            message = str(e).split("\nException raised from")[0]
        fut = work.get_future()
        assert fut.done(), "wait() raised before the future had the error"
        # A then() attached now runs at once, and sees the error.
        ran = []

        def record(f):
            try:
                f.value()
                ran.append("value")
            except RuntimeError:
                ran.append("error")

        fut.then(record)
        assert ran == ["error"], ran
        try:
            fut.wait()
            raise AssertionError("the future of a failed work gave a value")
        except RuntimeError as e:
            assert message.splitlines()[0] in str(e), (message, str(e))
        assert work.is_completed() and not work.is_success()
        if WORK_EXCEPTION_BOUND:
            assert work.exception() is not None
    t = torch.ones(5)
    dist.all_reduce(t)
    assert torch.all(t == world)
    return "ok"


def test_a_failed_work_fails_its_future_before_wait_raises(pools):
    assert pools(2).run(case_failed_work_fails_its_future_first) == ["ok", "ok"]


def case_completion_hook_and_pending_works():
    """torch's _register_on_completion_hook and _wait_for_pending_works on a hier group: the hook gets one
    WorkInfo per operation (its op type and sequence number, start before end), and once
    _wait_for_pending_works returns every operation issued before it finished and the hook saw it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(backend="hier")
    seen = []
    group._register_on_completion_hook(lambda info: seen.append(info))
    try:
        group._register_on_completion_hook(lambda info: None)
        raise AssertionError("a second completion hook was taken")
    except RuntimeError as e:
        assert "registered already" in str(e), e
    t = torch.ones(1000)
    works = [dist.all_reduce(t, group=group, async_op=True)]
    if rank == 0:
        time.sleep(0.3)  # the others' operations stay in flight until this rank joins
    works.append(dist.broadcast(torch.arange(10.0), 0, group=group, async_op=True))
    works.append(dist.all_gather_into_tensor(torch.empty(4 * world), torch.ones(4), group=group, async_op=True))
    peer = rank ^ 1
    if peer < world:
        op = dist.isend if rank % 2 == 0 else dist.irecv
        works.append(op(torch.ones(5), peer, group=group))
        # wait() with a timeout finishes a point-to-point work as soon as its message moved (it waited
        # for the whole timeout before: nobody polled the transfer).
        start = time.monotonic()
        works[-1].wait(timeout=datetime.timedelta(seconds=30))
        assert time.monotonic() - start < 10, f"wait(timeout) of a {op.__name__} took {time.monotonic() - start:.1f} s"
    group._wait_for_pending_works()
    assert all(w.is_completed() for w in works), [w.is_completed() for w in works]
    from torch._C._distributed_c10d import OpType

    expected = [OpType.ALLREDUCE, OpType.BROADCAST, OpType._ALLGATHER_BASE]
    collectives = [info for info in seen if info.op_type in set(expected)]
    assert [info.op_type for info in collectives] == expected, [info.op_type for info in seen]
    assert [info.seq for info in collectives] == sorted(info.seq for info in collectives)
    assert len(seen) == len(works), (len(seen), len(works))
    for info in seen:
        assert info.time_finished >= info.time_started and info.active_duration.total_seconds() >= 0
    return "ok"


def test_completion_hook_and_wait_for_pending_works(pools):
    assert pools(2).run(case_completion_hook_and_pending_works) == ["ok"] * 2
