"""Every collective on CPU tensors, every dtype, every reduce op, on 1 to 4 real processes over hier.

Each ``case_*`` function runs on every rank of a pool and checks that rank's results against
reference.py's independent expectations; the pytest functions below run them per world size.
"""

import math

import pytest
import torch
import torch.distributed as dist

from reference import (
    DTYPES,
    REDUCE_OPS,
    SIZES,
    Failures,
    check_equal,
    contribution,
    expected_reduction,
    reduce_op,
    supported,
)

WORLD_SIZES = [1, 2, 3, 4]


def _all_contributions(numel, dtype, seed, op="SUM", shape=None):
    return [contribution(r, numel, dtype, seed, op, shape) for r in range(dist.get_world_size())]


def _all_reduce(t, op):
    """dist.all_reduce, except where torch's Python layer itself refuses complex tensors (PRODUCT): then
    the group's allreduce directly, which is how the functional collectives reach the backend."""
    if t.is_complex() and op == "PRODUCT":
        opts = dist.AllreduceOptions()
        opts.reduceOp = reduce_op(op)
        dist.group.WORLD.allreduce([t], opts).wait()
    else:
        dist.all_reduce(t, op=reduce_op(op))


def _expect_refusal(fn, op_name, what):
    """An unsupported reduction must fail on the spot with a message naming the op and the group."""
    try:
        fn()
    except RuntimeError as e:
        message = str(e)
        if f"hier: {op_name} on group" not in message:
            raise AssertionError(f"{what}: refusal does not follow the message convention: {message}")
        return
    raise AssertionError(f"{what}: was accepted, but the op does not apply to the dtype")


# ---- rank-side cases ---------------------------------------------------------------------------------


def case_allreduce(seed):
    rank, failures = dist.get_rank(), Failures()
    for dtype in DTYPES:
        for op in REDUCE_OPS:
            for numel in SIZES:
                what = f"all_reduce {op} {dtype} x{numel}"
                t = contribution(rank, numel, dtype, seed, op)
                if not supported(op, dtype):
                    opts = dist.AllreduceOptions()
                    opts.reduceOp = reduce_op(op)
                    refused = lambda: dist.group.WORLD.allreduce([t], opts)  # noqa: E731
                    failures.check(_expect_refusal, refused, "allreduce", what)
                    continue
                _all_reduce(t, op)
                expected = expected_reduction(_all_contributions(numel, dtype, seed, op), op, dtype)
                failures.check(check_equal, t, expected, what)
    # Just over 4 MiB, an odd count: the size at which one host's ranks reduce through each other's memory
    # (single_copy) where they may, else through the slots, 128 KiB at a time. One dtype of each element
    # size, which is what sets where the chunks and the parts split; every dtype's reduction is checked
    # above, its vector loops and their tails included (70001 elements).
    for dtype in (torch.int8, torch.bfloat16, torch.float32, torch.float64, torch.complex128):
        numel = (4 << 20) // dtype.itemsize + 1
        for op in ("SUM", "AVG", "MAX", "PREMUL_SUM"):
            if supported(op, dtype):
                t = contribution(rank, numel, dtype, seed, op)
                _all_reduce(t, op)
                expected = expected_reduction(_all_contributions(numel, dtype, seed, op), op, dtype)
                failures.check(check_equal, t, expected, f"all_reduce {op} {dtype} x{numel}")
    failures.raise_if_any(rank)


def case_allreduce_coalesced(seed):
    rank, failures = dist.get_rank(), Failures()
    group = dist.group.WORLD
    dtypes = [torch.float32, torch.int64, torch.bfloat16, torch.float32, torch.int8]
    for op in ["SUM", "MAX", "AVG"]:
        tensors = [contribution(rank, 100 + 7 * i, dt, seed + i, op) for i, dt in enumerate(dtypes)]
        expected = [
            expected_reduction([contribution(r, 100 + 7 * i, dt, seed + i, op) for r in range(dist.get_world_size())], op, dt)
            for i, dt in enumerate(dtypes)
        ]
        opts = dist.AllreduceCoalescedOptions()
        opts.reduceOp = reduce_op(op)
        group.allreduce_coalesced(tensors, opts).wait()
        for i, (t, e) in enumerate(zip(tensors, expected)):
            failures.check(check_equal, t, e, f"allreduce_coalesced {op} tensor {i}")
        # The same through torch's coalescing manager.
        tensors = [contribution(rank, 50, dt, seed + i, op) for i, dt in enumerate(dtypes[:2])]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in tensors:
                dist.all_reduce(t, op=reduce_op(op))
        cm.wait()
        for i, t in enumerate(tensors):
            e = expected_reduction([contribution(r, 50, dtypes[i], seed + i, op) for r in range(dist.get_world_size())], op, dtypes[i])
            failures.check(check_equal, t, e, f"coalescing manager all_reduce {op} tensor {i}")
    failures.raise_if_any(rank)


def case_reduce(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for root in range(world):
        for dtype in DTYPES:
            for op in REDUCE_OPS:
                if not supported(op, dtype):
                    continue
                # 6000: carried only because the root carries nothing (at 48 KB a rank on 2 ranks, 24 KB on 3)
                for numel in [0, 5, 6000, 70001]:
                    what = f"reduce {op} {dtype} x{numel} root {root}"
                    t = contribution(rank, numel, dtype, seed, op)
                    original = t.clone()
                    dist.reduce(t, dst=root, op=reduce_op(op))
                    if rank == root:
                        expected = expected_reduction(_all_contributions(numel, dtype, seed, op), op, dtype)
                        failures.check(check_equal, t, expected, what)
                    else:
                        failures.check(check_equal, t, original, what + " (non-root input must not change)")
    failures.raise_if_any(rank)


def case_broadcast(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for root in range(world):
        for dtype in DTYPES:
            # 2000: carried in the agreement up to HIER_CARRY_BYTES, a share of it at every dtype's size
            for numel in SIZES + [2000, 300001]:
                t = contribution(rank, numel, dtype, seed)
                dist.broadcast(t, src=root)
                failures.check(check_equal, t, contribution(root, numel, dtype, seed), f"broadcast {dtype} x{numel} root {root}")
    failures.raise_if_any(rank)


def case_allgather(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for dtype in DTYPES:
        for numel in SIZES:
            outputs = [torch.empty(numel, dtype=dtype) for _ in range(world)]
            dist.all_gather(outputs, contribution(rank, numel, dtype, seed))
            for r in range(world):
                failures.check(check_equal, outputs[r], contribution(r, numel, dtype, seed), f"all_gather {dtype} x{numel} part {r}")
    # Uneven parts: rank r contributes r + 3 elements.
    outputs = [torch.empty(r + 3) for r in range(world)]
    dist.all_gather(outputs, contribution(rank, rank + 3, torch.float32, seed))
    for r in range(world):
        failures.check(check_equal, outputs[r], contribution(r, r + 3, torch.float32, seed), f"uneven all_gather part {r}")
    # The input in the next rank's output part, which the call overwrites with that rank's contribution.
    for numel in (5, 70001):
        outputs = [torch.full((numel,), -1.0) for _ in range(world)]
        theirs = outputs[(rank + 1) % world]
        theirs.copy_(contribution(rank, numel, torch.float32, seed))
        dist.all_gather(outputs, theirs)
        for r in range(world):
            failures.check(check_equal, outputs[r], contribution(r, numel, torch.float32, seed), f"all_gather x{numel} into the input, part {r}")
    failures.raise_if_any(rank)


def case_all_gather_into_tensor(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for dtype in DTYPES:
        for numel in SIZES:
            output = torch.empty(world * numel, dtype=dtype)
            dist.all_gather_into_tensor(output, contribution(rank, numel, dtype, seed))
            failures.check(check_equal, output, torch.cat(_all_contributions(numel, dtype, seed)), f"all_gather_into_tensor {dtype} x{numel}")
    # In place, as FSDP does it: the input is this rank's slice of the output.
    output = torch.zeros(world * 1000, dtype=torch.bfloat16)
    mine = output.narrow(0, rank * 1000, 1000)
    mine.copy_(contribution(rank, 1000, torch.bfloat16, seed))
    dist.all_gather_into_tensor(output, mine)
    failures.check(check_equal, output, torch.cat(_all_contributions(1000, torch.bfloat16, seed)), "in-place all_gather_into_tensor")
    # Two-dimensional output stacked along dimension 0.
    output = torch.empty(world, 3, 4, dtype=torch.int32)
    dist.all_gather_into_tensor(output, contribution(rank, 12, torch.int32, seed, shape=(3, 4)))
    failures.check(check_equal, output, torch.stack(_all_contributions(12, torch.int32, seed, shape=(3, 4))), "stacked all_gather_into_tensor")
    # Coalesced, through torch's coalescing manager (allgather_into_tensor_coalesced).
    outputs = [torch.empty(world * n, dtype=torch.float64) for n in (3, 700)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for out, n in zip(outputs, (3, 700)):
            dist.all_gather_into_tensor(out, contribution(rank, n, torch.float64, seed + n))
    cm.wait()
    for out, n in zip(outputs, (3, 700)):
        failures.check(check_equal, out, torch.cat(_all_contributions(n, torch.float64, seed + n)), f"coalesced all_gather_into_tensor x{n}")
    failures.raise_if_any(rank)


def case_all_gather_coalesced(seed):
    """torch's deprecated list-of-lists allgather (Gloo has it): parts of every size and shape, every dtype
    (one per call through torch's Python API, which asks for that; all in one call to the group, which
    takes them mixed), non-contiguous outputs, synchronous and asynchronous."""
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    shapes = [(1, n) if n == 13 else (n,) for n in SIZES]  # one of them two-dimensional

    def expected(r, dt, i, sh):
        return contribution(r, math.prod(sh), dt, seed + i, shape=sh)

    def check(outputs, dtypes, what):
        for r in range(world):
            for i, (dt, sh) in enumerate(zip(dtypes, shapes * len(DTYPES))):
                failures.check(check_equal, outputs[r][i], expected(r, dt, i, sh), f"{what} {dt} {sh} from rank {r}")

    for k, dt in enumerate(DTYPES):
        inputs = [expected(rank, dt, i, sh) for i, sh in enumerate(shapes)]
        before = [t.clone() for t in inputs]
        outputs = [[torch.full(sh, 7, dtype=dt) for sh in shapes] for _ in range(world)]
        work = dist.all_gather_coalesced(outputs, inputs, async_op=k % 2 == 1)
        if k % 2 == 1:
            work.wait()
        check(outputs, [dt] * len(shapes), "all_gather_coalesced")
        for i in range(len(inputs)):
            failures.check(check_equal, inputs[i], before[i], f"all_gather_coalesced left input {i} as it was")
    # Every dtype in one call, to the group itself.
    dtypes = [dt for dt in DTYPES for _ in shapes]
    inputs = [expected(rank, dt, i, sh) for i, (dt, sh) in enumerate(zip(dtypes, shapes * len(DTYPES)))]
    outputs = [[torch.empty_like(t) for t in inputs] for _ in range(world)]
    dist.group.WORLD.allgather_coalesced(outputs, inputs).wait()
    check(outputs, dtypes, "allgather_coalesced of mixed dtypes")
    # Transposed outputs, and a strided input.
    base = [contribution(r, 60, torch.float32, seed).reshape(6, 10) for r in range(world)]
    outputs = [[torch.empty(5, 6).t(), torch.empty(3)] for _ in range(world)]
    dist.all_gather_coalesced(outputs, [base[rank][:, ::2], torch.full((3,), float(rank))])
    for r in range(world):
        failures.check(check_equal, outputs[r][0], base[r][:, ::2], f"all_gather_coalesced into a transposed output, rank {r}")
        failures.check(check_equal, outputs[r][1], torch.full((3,), float(r)), f"all_gather_coalesced second part, rank {r}")
    failures.raise_if_any(rank)


def case_gather_scatter(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for root in range(world):
        for dtype in DTYPES:
            # 1500: a scatter carried only with the total known at some dtypes; 6000: a gather or scatter
            # carried only because the root carries nothing of its own (48 KB a part on 2 ranks)
            for numel in [0, 9, 1500, 6000, 70001]:
                gathered = [torch.empty(numel, dtype=dtype) for _ in range(world)] if rank == root else None
                dist.gather(contribution(rank, numel, dtype, seed), gathered, dst=root)
                if rank == root:
                    for r in range(world):
                        failures.check(check_equal, gathered[r], contribution(r, numel, dtype, seed), f"gather {dtype} x{numel} root {root} part {r}")
                out = torch.empty(numel, dtype=dtype)
                parts = [contribution(r, numel, dtype, seed + 1) for r in range(world)] if rank == root else None
                dist.scatter(out, parts, src=root)
                failures.check(check_equal, out, contribution(rank, numel, dtype, seed + 1), f"scatter {dtype} x{numel} root {root}")
    failures.raise_if_any(rank)


def case_reduce_scatter(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for dtype in DTYPES:
        for op in REDUCE_OPS:
            for numel in [0, 1, 13, 30001]:
                what = f"reduce_scatter {op} {dtype} x{numel}"
                # Rank r's input list: part p is contribution(r, numel) of seed + p.
                inputs = [contribution(rank, numel, dtype, seed + p, op) for p in range(world)]
                out = torch.empty(numel, dtype=dtype)
                if not supported(op, dtype):
                    failures.check(_expect_refusal, lambda: dist.reduce_scatter(out, inputs, op=reduce_op(op)), "reduce_scatter", what)
                    continue
                dist.reduce_scatter(out, inputs, op=reduce_op(op))
                expected = expected_reduction(_all_contributions(numel, dtype, seed + rank, op), op, dtype)
                failures.check(check_equal, out, expected, what)
                # The same reduction from one flat input (reduce_scatter_tensor).
                flat_out = torch.empty(numel, dtype=dtype)
                dist.reduce_scatter_tensor(flat_out, torch.cat(inputs), op=reduce_op(op))
                failures.check(check_equal, flat_out, expected, "reduce_scatter_tensor " + what[len("reduce_scatter "):])
                # In place, as NCCL allows: the output is this rank's own block of the input.
                flat = torch.cat(inputs)
                mine = flat[rank * numel:(rank + 1) * numel]
                dist.reduce_scatter_tensor(mine, flat, op=reduce_op(op))
                failures.check(check_equal, mine, expected, "in-place reduce_scatter_tensor " + what[len("reduce_scatter "):])
    # Coalesced, through torch's coalescing manager (reduce_scatter_tensor_coalesced).
    outs = [torch.empty(n, dtype=torch.float32) for n in (4, 500)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for out, n in zip(outs, (4, 500)):
            dist.reduce_scatter_tensor(out, torch.cat([contribution(rank, n, torch.float32, seed + 7 * p) for p in range(world)]))
    cm.wait()
    for out, n in zip(outs, (4, 500)):
        expected = expected_reduction([contribution(r, n, torch.float32, seed + 7 * rank) for r in range(world)], "SUM", torch.float32)
        failures.check(check_equal, out, expected, f"coalesced reduce_scatter_tensor x{n}")
    failures.raise_if_any(rank)


def case_all_to_all(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()

    def part(src, dst, rows, dtype):
        # What rank src sends rank dst: `rows` rows of 3 columns.
        return contribution(src * 100 + dst, rows * 3, dtype, seed).reshape(rows, 3)

    for dtype in DTYPES:
        # Equal split (empty split lists), 2 rows per peer.
        inp = torch.cat([part(rank, d, 2, dtype) for d in range(world)])
        out = torch.empty_like(inp)
        dist.all_to_all_single(out, inp)
        failures.check(check_equal, out, torch.cat([part(s, rank, 2, dtype) for s in range(world)]), f"all_to_all_single equal {dtype}")
        # Uneven split with empty parts: src sends (src + dst) % 3 rows to dst.
        rows = lambda s, d: (s + d) % 3 * 5  # noqa: E731
        inp = torch.cat([part(rank, d, rows(rank, d), dtype) for d in range(world)])
        out = torch.empty(sum(rows(s, rank) for s in range(world)), 3, dtype=dtype)
        dist.all_to_all_single(out, inp, [rows(s, rank) for s in range(world)], [rows(rank, d) for d in range(world)])
        failures.check(check_equal, out, torch.cat([part(s, rank, rows(s, rank), dtype) for s in range(world)]), f"all_to_all_single uneven {dtype}")
        # List form.
        outs = [torch.empty(4, 3, dtype=dtype) for _ in range(world)]
        dist.all_to_all(outs, [part(rank, d, 4, dtype) for d in range(world)])
        for s in range(world):
            failures.check(check_equal, outs[s], part(s, rank, 4, dtype), f"all_to_all {dtype} from {s}")
    # Large enough for rendezvous transfers.
    inp = torch.cat([part(rank, d, 20000, torch.float32) for d in range(world)])
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    failures.check(check_equal, out, torch.cat([part(s, rank, 20000, torch.float32) for s in range(world)]), "all_to_all_single large")
    failures.raise_if_any(rank)


def case_send_recv(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    if world == 1:
        return
    right, left = (rank + 1) % world, (rank - 1) % world
    for dtype in [torch.float32, torch.int64, torch.bfloat16, torch.bool, torch.complex128]:
        # Tagged messages received in the opposite order to the one they were sent in.
        sends = [dist.isend(contribution(rank, 100, dtype, seed + tag), right, tag=tag) for tag in (3, 5)]
        got5, got3 = torch.empty(100, dtype=dtype), torch.empty(100, dtype=dtype)
        r5 = dist.irecv(got5, left, tag=5)
        r3 = dist.irecv(got3, left, tag=3)
        for w in sends + [r5, r3]:
            w.wait()
        failures.check(check_equal, got5, contribution(left, 100, dtype, seed + 5), f"recv tag 5 {dtype}")
        failures.check(check_equal, got3, contribution(left, 100, dtype, seed + 3), f"recv tag 3 {dtype}")
    # A large message, blocking calls.
    big = torch.empty(1 << 20)
    if rank == 0:
        dist.send(contribution(0, 1 << 20, torch.float32, seed), 1)
    elif rank == 1:
        dist.recv(big, 0)
        failures.check(check_equal, big, contribution(0, 1 << 20, torch.float32, seed), "large recv")
    # Receive from any source: rank 0 hears from everyone and learns who sent what.
    if rank == 0:
        senders = []
        for _ in range(world - 1):
            got = torch.empty(1, dtype=torch.int64)
            senders.append(dist.recv(got, tag=9))
            failures.check(check_equal, got, torch.tensor([senders[-1] * 11]), "any-source payload")
        if sorted(senders) != list(range(1, world)):
            failures.messages.append(f"any-source senders {senders}")
    else:
        dist.send(torch.tensor([rank * 11]), 0, tag=9)
    failures.raise_if_any(rank)


def case_barrier_and_many_in_flight(seed):
    rank, world = dist.get_rank(), dist.get_world_size()
    for _ in range(20):
        dist.barrier()
    # Many asynchronous operations in flight on one group, waited in reverse order.
    tensors = [torch.full((1000,), float(rank + i)) for i in range(40)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for w in reversed(works):
        w.wait()
    for i, t in enumerate(tensors):
        expected = float(sum(r + i for r in range(world)))
        assert torch.all(t == expected), f"async all_reduce {i}: {t[0]} != {expected}"


def case_non_contiguous(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    base = [contribution(r, 60, torch.float32, seed).reshape(6, 10) for r in range(world)]
    t = base[rank].clone().t()  # a transposed view: not contiguous
    dist.all_reduce(t)
    failures.check(check_equal, t, sum(b for b in base).t(), "all_reduce on a transposed tensor")
    t = base[rank].clone().t()
    dist.broadcast(t, src=world - 1)
    failures.check(check_equal, t, base[world - 1].t(), "broadcast into a transposed tensor")
    outputs = [torch.empty(5, 6).t() for _ in range(world)]  # transposed views
    dist.all_gather(outputs, base[rank][:, ::2])  # a strided input
    for r in range(world):
        failures.check(check_equal, outputs[r], base[r][:, ::2], f"all_gather between strided tensors, part {r}")
    failures.raise_if_any(rank)


# ---- pytest side -------------------------------------------------------------------------------------

# One case per operation; the hierarchy and multi-node tests run these on their layouts too.
OP_CASES = [
    case_allreduce,
    case_allreduce_coalesced,
    case_reduce,
    case_broadcast,
    case_allgather,
    case_all_gather_into_tensor,
    case_all_gather_coalesced,
    case_gather_scatter,
    case_reduce_scatter,
    case_all_to_all,
    case_send_recv,
]
CASES = OP_CASES + [case_barrier_and_many_in_flight, case_non_contiguous]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_collective(pools, world_size, case):
    pools(world_size).run(case, 42)


# Small collectives travel inside the agreement's messages (HIER_CARRY_BYTES); with that off, the same
# small cases go through the algorithms, on an odd group.
@pytest.mark.parametrize("case", OP_CASES + [case_barrier_and_many_in_flight], ids=lambda c: c.__name__[len("case_"):])
def test_collective_not_carried(pools, case):
    pools(3, env={"HIER_CARRY_BYTES": "0"}).run(case, 43)
