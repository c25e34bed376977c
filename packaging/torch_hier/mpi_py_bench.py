"""Open MPI called from Python, the way hier is: torch_hier.bench's second Open MPI anchor.

    mpirun -np 2 python -m torch_hier.mpi_py_bench float32 plan.txt

mpi_bench.c times Open MPI from C, with nothing between two calls. A torch program calls its collectives
from Python, and every rank runs torch's dispatch between two of them; hier's own time in the benchmark
(its time minus that dispatch floor) includes what those ranks' Python does to a synchronising call: a
rank that reaches it early waits for a later one. This program puts Open MPI in the same place: each
iteration dispatches the op through torch on the ``fake`` backend (the benchmark's floor: the op at
1 KiB or less, which moves nothing) and then runs the Open MPI op through mpi4py on buffers of the
point's size. Its own time is that loop's time minus the fake call's alone, in the same processes:
Open MPI's counterpart of hier's own time, mpi4py's binding included.

The plan is mpi_bench.c's ("<op> <count> <warmup> <iterations>" a line, counts as torch_hier.bench sizes
them). Rank 0 prints one line per point: "<op> <count> <seconds per iteration> <seconds of the fake call
alone>", each averaged over ranks."""

import functools
import os
import sys
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.testing._internal.distributed.fake_pg import FakeStore

from torch_hier.bench import Case, uneven_shares


def mpi_call(op, case, comm):
    """The Open MPI counterpart of case.run, on numpy views of the case's tensors."""
    rank, world = comm.Get_rank(), comm.Get_size()
    np_ = torch.Tensor.numpy  # an array that shares the tensor's memory
    if op == "allreduce":
        buf = np_(case.buf)
        return lambda: comm.Allreduce(MPI.IN_PLACE, buf)
    if op == "allgather":
        inp, out = np_(case.inp), np_(case.out)
        return lambda: comm.Allgather(inp, out)
    if op == "reduce_scatter":
        inp, out = np_(case.inp), np_(case.out)
        return lambda: comm.Reduce_scatter_block(inp, out)
    if op == "alltoall":
        inp, out = np_(case.inp), np_(case.out)
        return lambda: comm.Alltoall(inp, out)
    if op == "alltoall_uneven":
        inp, out = np_(case.inp), np_(case.out)
        sends = [uneven_shares(rank, d) * case.unit for d in range(world)]
        receives = [uneven_shares(s, rank) * case.unit for s in range(world)]
        offsets = lambda counts: [sum(counts[:i]) for i in range(len(counts))]  # noqa: E731
        send, receive = [inp, (sends, offsets(sends))], [out, (receives, offsets(receives))]
        return lambda: comm.Alltoallv(send, receive)
    if op == "broadcast":
        buf = np_(case.buf)
        return lambda: comm.Bcast(buf, root=0)
    if op == "reduce":
        # In place on the root, as torch's reduce is.
        buf = np_(case.buf)
        if rank == 0:
            return lambda: comm.Reduce(MPI.IN_PLACE, buf, root=0)
        return lambda: comm.Reduce(buf, None, root=0)
    if op == "gather":
        inp = np_(case.inp)
        out = np_(torch.empty(case.count, dtype=case.dtype)) if rank == 0 else None
        return lambda: comm.Gather(inp, out, root=0)
    if op == "scatter":
        inp = np_(torch.cat(case.parts)) if rank == 0 else None
        out = np_(case.out)
        return lambda: comm.Scatter(inp, out, root=0)
    if op == "sendrecv":
        peer = rank ^ 1
        if peer >= world:
            return lambda: None  # the odd rank out sits it out, as in the benchmark
        send, receive = np_(case.buf), np_(case.recv_buf())
        return lambda: comm.Sendrecv(send, peer, recvbuf=receive, source=peer)
    if op == "barrier":
        return comm.Barrier
    raise ValueError(op)


def seconds_per_call(run, warmup, iterations, comm):
    """Time per call of `run`, averaged over ranks, with mpi_bench.c's fences."""
    for _ in range(warmup):
        run()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        run()
    comm.Barrier()
    return comm.allreduce((time.perf_counter() - start) / iterations) / comm.Get_size()


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: mpi_py_bench float32|float64|int32 PLAN")
    dtype = getattr(torch, argv[0])
    esize = torch.tensor([], dtype=dtype).element_size()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    with open(argv[1]) as f:
        plan = [(op, int(count), int(warmup), int(iterations))
                for op, count, warmup, iterations in (line.split() for line in f if line.strip())]
    floors = {}  # by op: the dispatch alone, and its seconds per call
    for op, count, warmup, iterations in plan:
        if op not in floors:
            # The benchmark's floor: the op on the fake backend at its first size, 1 KiB at most.
            small = Case(op, min(count * esize, 1024), dtype, rank, world)
            dispatch = functools.partial(small.run, None)
            mpi_call(op, small, comm)()  # Open MPI sets up each collective's paths on first use
            floors[op] = dispatch, seconds_per_call(dispatch, max(warmup, 20), max(iterations, 200), comm)
        dispatch, floor = floors[op]
        call = mpi_call(op, Case(op, count * esize, dtype, rank, world), comm)

        def both():
            dispatch()
            call()

        t = seconds_per_call(both, warmup, iterations, comm)
        if rank == 0:
            print(f"{op} {count} {t:.9g} {floor:.9g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1:])
