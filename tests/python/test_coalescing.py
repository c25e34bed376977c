"""Coalescing (startCoalescing / endCoalescing) and collective timing, reached from torch's Python API.

hier says it supports coalescing, so batch_isend_irecv and _coalescing_manager(device=...) hand it the
batch: the operations run as they are called, and one Work stands for them all, as ProcessGroupNCCL's.
"""

import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int8, torch.bool]


def _payload(sender, receiver, index, dtype):
    """What `sender` sends `receiver` as its `index`-th message: a size and values of their own."""
    n = 1 + 7 * sender + 3 * receiver + 11 * index
    values = torch.arange(n, dtype=torch.float64) * (sender + 1) + 100 * receiver + index
    if dtype == torch.bool:
        return (values.to(torch.int64) % 2).bool()
    if dtype == torch.int8:
        return (values.to(torch.int64) % 100).to(torch.int8)
    return values.to(dtype)


def case_batch_isend_irecv_is_one_work():
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.supports_coalescing
    # Every rank sends to every other, two messages of each dtype on different tags, with the receives
    # posted before the sends on odd ranks: nothing in a batch may wait for the order of its peers'.
    ops, expected, received = [], [], []
    for peer in range(world):
        if peer == rank:
            continue
        for index, dtype in enumerate(DTYPES * 2):
            out = _payload(rank, peer, index, dtype)
            buf = torch.empty_like(_payload(peer, rank, index, dtype))
            send = dist.P2POp(dist.isend, out, peer, tag=index)
            recv = dist.P2POp(dist.irecv, buf, peer, tag=index)
            ops += [recv, send] if rank % 2 else [send, recv]
            expected.append(_payload(peer, rank, index, dtype))
            received.append(buf)
    works = dist.batch_isend_irecv(ops)
    # One Work for the batch (Gloo, which does not coalesce, returns one per operation).
    assert len(works) == 1, len(works)
    for work in works:
        work.wait()
        assert work.is_completed() and work.is_success()
    for got, want in zip(received, expected):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    # The future holds every operation's tensors, in issue order, and is complete once wait() returned.
    future = works[0].get_future()
    assert future.done()
    values = future.value()
    order = [op.tensor for op in ops]
    assert len(values) == len(order) and all(v.data_ptr() == t.data_ptr() for v, t in zip(values, order))
    return "ok"


def test_batch_isend_irecv_is_one_work(pools):
    for world in (2, 3, 5):
        assert pools(world).run(case_batch_isend_irecv_is_one_work) == ["ok"] * world


def case_coalescing_manager_with_a_device():
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu = torch.device("cpu")
    # Collectives the fast path does not take (broadcast) reach the backend one by one inside the block;
    # all_reduce is gathered into one allreduce_coalesced: endCoalescing's work covers both.
    a = torch.full((5,), float(rank))
    b = torch.arange(7, dtype=torch.float64) + rank
    c = torch.full((3,), rank + 1, dtype=torch.int32)
    d = torch.full((9,), 2.0 * rank)
    with _coalescing_manager(dist.group.WORLD, cpu, async_ops=True) as cm:
        dist.broadcast(a, src=world - 1)
        dist.broadcast(b, src=0)
        dist.all_reduce(c, op=dist.ReduceOp.PRODUCT)
        dist.all_reduce(d, op=dist.ReduceOp.PRODUCT)
    assert len(cm.works) == 1
    cm.wait()
    assert torch.equal(a, torch.full((5,), float(world - 1)))
    assert torch.equal(b, torch.arange(7, dtype=torch.float64))
    product = 1
    for r in range(world):
        product *= r + 1
    assert torch.equal(c, torch.full((3,), product, dtype=torch.int32))
    d_product = 1.0
    for r in range(world):
        d_product *= 2.0 * r
    assert torch.equal(d, torch.full((9,), d_product))
    # Synchronous: the manager waits for the batch itself.
    e = torch.full((4,), float(rank))
    with _coalescing_manager(dist.group.WORLD, cpu):
        dist.broadcast(e, src=0)
    assert torch.equal(e, torch.zeros(4))
    # An empty batch is a completed work.
    with _coalescing_manager(dist.group.WORLD, cpu, async_ops=True) as cm:
        pass
    assert len(cm.works) == 1 and cm.works[0].is_completed()
    cm.wait()
    return "ok"


def test_coalescing_manager_with_a_device(pools):
    for world in (1, 3, 4):
        assert pools(world).run(case_coalescing_manager_with_a_device) == ["ok"] * world


def case_coalescing_misuse_leaves_the_group_usable():
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    cpu = torch.device("cpu")
    # An end without a start says what to do.
    try:
        pg._end_coalescing(cpu)
    except ValueError as error:
        message = str(error)
        assert "end_coalescing" in message and "start_coalescing" in message and "group" in message, message
    else:
        raise AssertionError("end_coalescing without start_coalescing did not raise")
    # A bad call inside a block raises on the caller; the next block starts afresh.
    pg._start_coalescing(cpu)
    try:
        dist.isend(torch.ones(2), dst=world + 3)
    except (ValueError, RuntimeError) as error:
        assert "peer" in str(error) or "rank" in str(error), error
    else:
        raise AssertionError("a send to a rank outside the group did not raise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pg._start_coalescing(cpu)  # the open batch is dropped, with a warning in hier's log
    t = torch.full((6,), float(rank))
    dist.all_reduce(t)  # not through the fast path: no coalescing manager here
    work = pg._end_coalescing(cpu)
    work.wait()
    assert torch.equal(t, torch.full((6,), float(sum(range(world)))))
    # Outside any block, the group works as ever.
    u = torch.ones(3)
    dist.all_reduce(u)
    assert torch.equal(u, torch.full((3,), float(world)))
    return "ok"


def test_coalescing_misuse_leaves_the_group_usable(pools):
    assert pools(2).run(case_coalescing_misuse_leaves_the_group_usable) == ["ok"] * 2


def case_a_failed_operation_fails_its_batch():
    rank = dist.get_rank()
    if rank == 0:
        ops = [dist.P2POp(dist.isend, torch.arange(8.0), 1), dist.P2POp(dist.isend, torch.arange(3.0), 1, tag=1)]
    else:
        # The first receive is too small for its message: that operation fails, the other does not.
        first, second = torch.empty(4), torch.empty(3)
        ops = [dist.P2POp(dist.irecv, first, 0), dist.P2POp(dist.irecv, second, 0, tag=1)]
    (work,) = dist.batch_isend_irecv(ops)
    try:
        work.wait()
    except RuntimeError as error:
        assert rank == 1, f"rank {rank}: {error}"
        assert "recv" in str(error), error
        assert not work.is_success()
        assert torch.equal(second, torch.arange(3.0))  # waited for too, and delivered
        assert work.get_future().done()
        try:
            work.get_future().wait()
        except RuntimeError:
            pass
        else:
            raise AssertionError("the batch's future hid its failure")
        return "failed"
    return "sent"


def test_a_failed_operation_fails_its_batch():
    from harness import run_job

    assert run_job(2, case_a_failed_operation_fails_its_batch) == ["sent", "failed"]


def case_collective_timing():
    rank = dist.get_rank()
    pg = dist.group.WORLD
    pg._enable_collectives_timing()  # Gloo's accepts it; so does hier's
    if rank == 1:
        time.sleep(0.4)
    t = torch.ones(1000)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    duration = work._get_duration()  # ms
    # Rank 0 started first and waited for rank 1 inside the operation; rank 1 found it ready.
    return duration


def test_collective_timing(pools):
    first, second = pools(2).run(case_collective_timing)
    assert 300 <= first < 10_000, first
    assert 0 <= second < first - 200, (first, second)


def case_abort_all_groups():
    t = torch.ones(3)
    dist.all_reduce(t)
    sub = dist.new_group([0, 1])
    dist.all_reduce(t, group=sub)
    # torch aborts every group inside one coalescing block of the default group's backend, where that
    # backend coalesces (hier's does): the block ends on an aborted group.
    dist.distributed_c10d._abort_process_group()
    return "aborted"


def test_aborting_every_group_inside_a_coalescing_block():
    from harness import run_job

    assert run_job(2, case_abort_all_groups) == ["aborted"] * 2
