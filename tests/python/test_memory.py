"""Nothing kept per operation: after a warm-up, the heap memory a rank has in use (glibc's mallinfo2:
bytes handed out, not cached) stays flat over thousands more operations of every kind, sync and async,
carried in the agreement or through the algorithms. The soak (tests/multinode) watches RSS, which also
moves with the allocator's fragmentation; this watches what hier and torch actually hold."""

import ctypes
import gc
import time

import torch
import torch.distributed as dist

OPS = ["all_reduce", "broadcast", "all_gather_into_tensor", "all_to_all_single", "barrier", "send_recv"]
WARMUP, ROUNDS, WINDOWS = 3000, 500, 3
# What a rank may gain per operation and still be flat: torch's own bookkeeping wobbles by a few bytes.
SLACK_BYTES_PER_OP = 32


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _in_use():
    # An async operation's wait() returns as soon as the group's thread completes it; that thread lets go
    # of the operation's tensors a moment later. Freeing a tensor that has a Python object takes the GIL,
    # one tensor at a time, and gc.collect() below holds the GIL for milliseconds: without this pause the
    # thread had freed the input but not yet the output when one CI run measured, and the last operation's
    # 800 KB output counted as kept. Sleeping releases the GIL.
    time.sleep(0.05)
    gc.collect()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def _issue(op, numel, is_async):
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(numel)
    if op == "all_reduce":
        return dist.all_reduce(t, async_op=is_async)
    if op == "broadcast":
        return dist.broadcast(t, 0, async_op=is_async)
    if op == "all_gather_into_tensor":
        return dist.all_gather_into_tensor(torch.empty(numel * world), t, async_op=is_async)
    if op == "all_to_all_single":
        return dist.all_to_all_single(torch.empty(numel * world), torch.ones(numel * world), async_op=is_async)
    if op == "barrier":
        return dist.barrier(async_op=is_async)
    # send/recv: 0 to 1
    return dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)


def case_memory_per_operation():
    """Bytes gained per operation, by (op, size, sync or async), on this rank."""
    def rounds(op, numel, is_async, n):
        for _ in range(n):
            work = _issue(op, numel, is_async)
            if work is not None:
                work.wait()

    # Warm-up: torch's flight recorder and hier's work table fill their rings (a few thousand entries).
    for op in OPS:
        rounds(op, 4, False, WARMUP // len(OPS))
    # Every gc.collect() in _in_use() would walk all of torch's objects (0.1 s, 144 times); frozen, they are
    # left out, and what the operations make from here on is still collected.
    gc.freeze()
    try:
        return _grown_per_operation(rounds)
    finally:
        gc.unfreeze()


def _grown_per_operation(rounds):
    grown = {}
    for op in OPS:
        for numel, n in ((4, ROUNDS), (100000, ROUNDS // 4)):  # carried in the agreement; through the algorithms
            for is_async in (False, True):
                # A leak shows in every window; a ring that fills or a vector that doubles, in one.
                windows = []
                for _ in range(WINDOWS):
                    before = _in_use()
                    rounds(op, numel, is_async, n)
                    windows.append((_in_use() - before) / n)
                grown[f"{op}, {numel} elements, {'async' if is_async else 'sync'}"] = min(windows)
    return grown


def test_heap_in_use_stays_flat(pools):
    for rank, grown in enumerate(pools(2).run(case_memory_per_operation)):
        kept = {what: round(per_op) for what, per_op in grown.items() if per_op >= SLACK_BYTES_PER_OP}
        assert not kept, f"rank {rank} kept bytes per operation: {kept}"
