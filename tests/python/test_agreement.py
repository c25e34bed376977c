"""Bad input and disagreement between ranks, one table: every rank raises, at once, and the group goes on.

Before a CPU collective moves any data its ranks agree on it (transport/agreement.h): a rank that refuses
the call (arguments only it can see are wrong) tells the others why, and ranks that make different calls
(op, dtype, element count, reduction, root) find out. Each row below is one such case, run on 3 ranks
(root 0, a non-root 1, the last rank 2). For every row, on every rank: the call raises an error that
follows hier's convention and names the op; the ranks that did nothing wrong are told which rank refused
or which ranks disagree and what each passed; it comes within a second, not at the deadline; and the next
collective works. A second pass through the table adds no thread and no shared-memory segment.

The calls go to the process group object where torch's Python layer would reject the input before hier
sees it: these tests are about hier.
"""

import os
import re
import time

import torch
import torch.distributed as dist

from test_errors import _opts

# hier: <op> on group '<name>' (seq <n>, rank <r>/<size>): <what is wrong>
CONVENTION = re.compile(r"hier: (\S+) on group '[^']+' \(seq \d+, rank \d+/\d+\): .+")
FAST_S = 1.0


def _pg():
    return dist.group.WORLD


# ---- the calls: each takes (rank, world) and makes one collective call, bad on some ranks ------------

def allreduce(t, op=lambda r: dist.ReduceOp.SUM):
    return lambda r, w: _pg().allreduce([t(r)], _opts(dist.AllreduceOptions, reduceOp=op(r)))


def broadcast(t, root):
    return lambda r, w: _pg().broadcast([t(r)], _opts(dist.BroadcastOptions, rootRank=root(r)))


def reduce(t, root, op=lambda r: dist.ReduceOp.SUM):
    return lambda r, w: _pg().reduce([t(r)], _opts(dist.ReduceOptions, rootRank=root(r), reduceOp=op(r)))


def gather(inp, outs, root):
    return lambda r, w: _pg().gather(outs(r, w), [inp(r)], _opts(dist.GatherOptions, rootRank=root(r)))


def scatter(out, ins, root):
    return lambda r, w: _pg().scatter([out(r)], ins(r, w), _opts(dist.ScatterOptions, rootRank=root(r)))


def allgather(outs, inp):
    return lambda r, w: _pg().allgather([outs(r, w)], [inp(r)])


def allgather_into(out, inp):
    return lambda r, w: _pg()._allgather_base(out(r, w), inp(r))


def allgather_coalesced(outs, ins):
    return lambda r, w: _pg().allgather_coalesced(outs(r, w), ins(r))


def reduce_scatter(out, ins, op=lambda r: dist.ReduceOp.SUM):
    return lambda r, w: _pg().reduce_scatter([out(r)], [ins(r, w)], _opts(dist.ReduceScatterOptions, reduceOp=op(r)))


def reduce_scatter_tensor(out, inp, op=lambda r: dist.ReduceOp.SUM):
    return lambda r, w: _pg()._reduce_scatter_base(out(r, w), inp(r, w), _opts(dist.ReduceScatterOptions, reduceOp=op(r)))


def alltoall_single(out, inp, out_splits, in_splits):
    return lambda r, w: _pg().alltoall_base(out(r, w), inp(r, w), out_splits(r, w), in_splits(r, w), dist.AllToAllOptions())


def alltoall(outs, ins):
    return lambda r, w: _pg().alltoall(outs(r, w), ins(r, w), dist.AllToAllOptions())


def allreduce_coalesced(ts, op=lambda r: dist.ReduceOp.SUM):
    return lambda r, w: _pg().allreduce_coalesced(ts(r), _opts(dist.AllreduceCoalescedOptions, reduceOp=op(r)))


def either(choose, a, b):
    """Rank r makes call `a` where choose(r, w), else call `b`."""
    return lambda r, w: a(r, w) if choose(r, w) else b(r, w)


# Who is wrong: everyone, the root (0), a non-root (1), the last rank; or nobody alone ("disagree").
ALL, ROOT, NONROOT, LAST, DISAGREE = "all", "root", "non-root", "last", "disagree"
WHO = {ALL: lambda r, w: True, ROOT: lambda r, w: r == 0, NONROOT: lambda r, w: r == 1, LAST: lambda r, w: r == w - 1}


def bad(who):
    return lambda r, w: WHO[who](r, w)


F = lambda n: (lambda r: torch.ones(n))  # noqa: E731
SUM, MAX, AVG, BAND, BXOR = dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG, dist.ReduceOp.BAND, dist.ReduceOp.BXOR
ROOT0 = lambda r: 0  # noqa: E731


def sized(who, good, wrong):
    """A tensor factory: `wrong` elements on the ranks `who` names, `good` on the others."""
    return lambda r, w=None: torch.ones(wrong if WHO[who](r, w or dist.get_world_size()) else good)


def rows(n_rows, width):
    return lambda r, w: torch.ones(n_rows, width)


# (name, who is wrong, the op named in the error (by rank where the ranks call different ops), what the
#  wrong rank's own error says, the call)
CASES = [
    # -- allreduce
    ("allreduce two tensors, all", ALL, "allreduce", "exactly one tensor", lambda r, w: _pg().allreduce([torch.ones(2), torch.ones(2)])),
    ("allreduce two tensors, non-root", NONROOT, "allreduce", "exactly one tensor",
     either(bad(NONROOT), lambda r, w: _pg().allreduce([torch.ones(2), torch.ones(2)]), allreduce(F(2)))),
    ("allreduce bitwise on floats, last", LAST, "allreduce", "bitwise", allreduce(F(4), lambda r: BAND if r == dist.get_world_size() - 1 else SUM)),
    ("allreduce uint16, last", LAST, "allreduce", "cannot reduce",
     allreduce(lambda r: torch.ones(4, dtype=torch.uint16 if r == dist.get_world_size() - 1 else torch.float32))),
    ("allreduce sparse MAX, root", ROOT, "allreduce", "summed only",
     allreduce(lambda r: torch.ones(4).to_sparse() if r == 0 else torch.ones(4), op=lambda r: dist.ReduceOp.MAX)),
    # (to the backend itself: torch answers a meta tensor's call without asking the backend)
    ("allreduce meta device, last", LAST, "allreduce", "not supported",
     either(bad(LAST), lambda r, w: _pg()._get_backend(torch.device("cpu")).allreduce([torch.empty(4, device="meta")], dist.AllreduceOptions()),
            allreduce(F(4)))),
    ("allreduce PREMUL_SUM on ints, non-root", NONROOT, "allreduce", "PREMUL_SUM",
     allreduce(lambda r: torch.ones(4, dtype=torch.int32), lambda r: dist._make_nccl_premul_sum(2.0) if r == 1 else SUM)),
    ("allreduce counts differ", DISAGREE, "allreduce", None, allreduce(sized(LAST, 100_000, 200_000))),
    ("allreduce dtypes differ", DISAGREE, "allreduce", None,
     allreduce(lambda r: torch.ones(8, dtype=torch.int32 if r == 1 else torch.float32))),
    ("allreduce ops differ", DISAGREE, "allreduce", None, allreduce(F(8), lambda r: MAX if r == 1 else SUM)),
    ("allreduce sparse beside dense", DISAGREE, "allreduce", None,
     allreduce(lambda r: torch.ones(4).to_sparse() if r == 0 else torch.ones(4))),
    ("allreduce beside broadcast", DISAGREE, lambda r, w: "broadcast" if r == w - 1 else "allreduce", None,
     either(bad(LAST), broadcast(F(8), ROOT0), allreduce(F(8)))),
    # -- allreduce_coalesced
    ("allreduce_coalesced bitwise on floats, last", LAST, "allreduce_coalesced", "bitwise",
     allreduce_coalesced(lambda r: [torch.ones(2), torch.ones(3)], lambda r: BAND if r == dist.get_world_size() - 1 else SUM)),
    ("allreduce_coalesced tensor counts differ", DISAGREE, "allreduce_coalesced", None,
     allreduce_coalesced(lambda r: [torch.ones(2)] * (3 if r == 1 else 2))),
    ("allreduce_coalesced sizes differ", DISAGREE, "allreduce_coalesced", None,
     allreduce_coalesced(lambda r: [torch.ones(2), torch.ones(5 if r == 0 else 3)])),
    # -- broadcast
    ("broadcast root out of range, all", ALL, "broadcast", "root rank", broadcast(F(8), lambda r: dist.get_world_size())),
    ("broadcast root out of range, last", LAST, "broadcast", "root rank",
     broadcast(F(8), lambda r: -1 if r == dist.get_world_size() - 1 else 0)),
    ("broadcast root tensor 1, non-root", NONROOT, "broadcast", "root tensor",
     lambda r, w: _pg().broadcast([torch.ones(8)], _opts(dist.BroadcastOptions, rootRank=0, rootTensor=1 if r == 1 else 0))),
    ("broadcast roots differ", DISAGREE, "broadcast", None, broadcast(F(8), lambda r: r)),
    ("broadcast counts differ", DISAGREE, "broadcast", None, broadcast(sized(ROOT, 10, 11), ROOT0)),
    ("broadcast dtypes differ", DISAGREE, "broadcast", None,
     broadcast(lambda r: torch.ones(8, dtype=torch.float64 if r == 0 else torch.float32), ROOT0)),
    # -- reduce
    ("reduce root out of range, root", ROOT, "reduce", "root rank", reduce(F(8), lambda r: 99 if r == 0 else 0)),
    ("reduce bitwise on floats, all", ALL, "reduce", "bitwise", reduce(F(8), ROOT0, lambda r: BXOR)),
    ("reduce roots differ", DISAGREE, "reduce", None, reduce(F(8), lambda r: 1 if r == dist.get_world_size() - 1 else 0)),
    # -- gather
    ("gather wrong output sizes, root", ROOT, "gather", "every output must match",
     gather(F(4), lambda r, w: [[torch.empty(5) for _ in range(w)]] if r == 0 else [], ROOT0)),
    ("gather too few outputs, root", ROOT, "gather", "one list of one output tensor per rank",
     gather(F(4), lambda r, w: [[torch.empty(4)]] if r == 0 else [], ROOT0)),
    ("gather outputs on a non-root", NONROOT, "gather", "only the root",
     gather(F(4), lambda r, w: [[torch.empty(4) for _ in range(w)]] if r in (0, 1) else [], ROOT0)),
    ("gather wrong output dtype, root", ROOT, "gather", "every output must match",
     gather(F(4), lambda r, w: [[torch.empty(4, dtype=torch.int64) for _ in range(w)]] if r == 0 else [], ROOT0)),
    ("gather counts differ", DISAGREE, "gather", None,
     gather(sized(LAST, 4, 6), lambda r, w: [[torch.empty(4) for _ in range(w)]] if r == 0 else [], ROOT0)),
    # -- scatter
    ("scatter wrong input sizes, root", ROOT, "scatter", "every input must match",
     scatter(F(4), lambda r, w: [[torch.empty(5) for _ in range(w)]] if r == 0 else [], ROOT0)),
    ("scatter too many inputs, root", ROOT, "scatter", "one list of one input tensor per rank",
     scatter(F(4), lambda r, w: [[torch.empty(4) for _ in range(w + 1)]] if r == 0 else [], ROOT0)),
    ("scatter inputs on the last rank", LAST, "scatter", "only the root",
     scatter(F(4), lambda r, w: [[torch.empty(4) for _ in range(w)]] if r in (0, w - 1) else [], ROOT0)),
    ("scatter roots differ", DISAGREE, "scatter", None,
     scatter(F(4), lambda r, w: [[torch.empty(4) for _ in range(w)]] if r == 0 else [], lambda r: 1 if r == dist.get_world_size() - 1 else 0)),
    # -- allgather (list)
    ("allgather too many outputs, last", LAST, "allgather", "one output tensor per rank",
     allgather(lambda r, w: [torch.empty(4) for _ in range(w + (r == w - 1))], F(4))),
    ("allgather output dtype, non-root", NONROOT, "allgather", "differs from the input",
     allgather(lambda r, w: [torch.empty(4, dtype=torch.int32 if r == 1 else torch.float32) for _ in range(w)], F(4))),
    ("allgather output sizes differ", DISAGREE, "allgather", None,
     lambda r, w: _pg().allgather([[torch.empty(6 if (r == 0 and p == 1) else 4) for p in range(w)]], [torch.ones(4)])),
    # -- all_gather_into_tensor
    ("all_gather_into_tensor output size, last", LAST, "all_gather_into_tensor", "must hold group size",
     allgather_into(lambda r, w: torch.empty(4 * w + (r == w - 1)), F(4))),
    ("all_gather_into_tensor dtype, non-root", NONROOT, "all_gather_into_tensor", "differs from the input",
     allgather_into(lambda r, w: torch.empty(4 * w, dtype=torch.float64 if r == 1 else torch.float32), F(4))),
    ("all_gather_into_tensor counts differ", DISAGREE, "all_gather_into_tensor", None,
     lambda r, w: _pg()._allgather_base(torch.empty((5 if r == 1 else 4) * w), torch.ones(5 if r == 1 else 4))),
    # -- allgather_coalesced (the deprecated list of lists)
    ("allgather_coalesced output list too short, last", LAST, "allgather_coalesced", "one output per input",
     allgather_coalesced(lambda r, w: [[torch.empty(2), torch.empty(3)][: 1 if r == w - 1 else 2] for _ in range(w)],
                         lambda r: [torch.ones(2), torch.ones(3)])),
    ("allgather_coalesced part sizes differ", DISAGREE, "allgather_coalesced", None,
     allgather_coalesced(lambda r, w: [[torch.empty(2), torch.empty(4 if r == 1 else 3)] for _ in range(w)],
                         lambda r: [torch.ones(2), torch.ones(4 if r == 1 else 3)])),
    ("allgather_coalesced part dtypes differ", DISAGREE, "allgather_coalesced", None,
     allgather_coalesced(lambda r, w: [[torch.empty(2, dtype=torch.int32 if r == 1 else torch.float32)] for _ in range(w)],
                         lambda r: [torch.ones(2, dtype=torch.int32 if r == 1 else torch.float32)])),
    # -- reduce_scatter
    ("reduce_scatter too few inputs, last", LAST, "reduce_scatter", "one input tensor per rank",
     reduce_scatter(F(2), lambda r, w: [torch.ones(2) for _ in range(w - (r == w - 1))])),
    ("reduce_scatter bitwise on floats, root", ROOT, "reduce_scatter", "bitwise",
     reduce_scatter(F(2), lambda r, w: [torch.ones(2) for _ in range(w)], lambda r: BXOR if r == 0 else SUM)),
    ("reduce_scatter_tensor input size, last", LAST, "reduce_scatter_tensor", "must hold group size",
     reduce_scatter_tensor(lambda r, w: torch.empty(2), lambda r, w: torch.ones(2 * w + (r == w - 1)))),
    ("reduce_scatter_tensor ops differ", DISAGREE, "reduce_scatter_tensor", None,
     reduce_scatter_tensor(lambda r, w: torch.empty(2), lambda r, w: torch.ones(2 * w), lambda r: AVG if r == 1 else SUM)),
    ("reduce_scatter_tensor counts differ", DISAGREE, "reduce_scatter_tensor", None,
     lambda r, w: _pg()._reduce_scatter_base(torch.empty(3 if r == 0 else 2), torch.ones((3 if r == 0 else 2) * w))),
    # -- all_to_all
    ("all_to_all_single splits do not add up, last", LAST, "all_to_all_single", "split sizes add up to",
     alltoall_single(rows(3, 2), rows(3, 2), lambda r, w: [1] * w, lambda r, w: [2 if r == w - 1 else 1] * w)),
    ("all_to_all_single too many splits, non-root", NONROOT, "all_to_all_single", "split per rank",
     alltoall_single(rows(3, 2), rows(3, 2), lambda r, w: [1] * w, lambda r, w: [1] * w + ([0] if r == 1 else []))),
    ("all_to_all_single row sizes differ", DISAGREE, "all_to_all_single", None,
     lambda r, w: _pg().alltoall_base(torch.empty(w, 3 if r == 0 else 2), torch.ones(w, 3 if r == 0 else 2), [], [], dist.AllToAllOptions())),
    ("all_to_all too many tensors, root", ROOT, "all_to_all", "one input and one output tensor per rank",
     alltoall(lambda r, w: [torch.empty(1) for _ in range(w)], lambda r, w: [torch.ones(1) for _ in range(w + (r == 0))])),
    ("all_to_all dtypes differ", DISAGREE, "all_to_all", None,
     alltoall(lambda r, w: [torch.empty(1, dtype=torch.int64 if r == 1 else torch.float32) for _ in range(w)],
              lambda r, w: [torch.ones(1, dtype=torch.int64 if r == 1 else torch.float32) for _ in range(w)])),
    # -- barrier beside a collective
    ("barrier beside allreduce", DISAGREE, lambda r, w: "barrier" if r == 0 else "allreduce", None,
     either(bad(ROOT), lambda r, w: _pg().barrier(), allreduce(F(4)))),
]


def _threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as f:
            names.append(f.read().strip())
    return sorted(names)


def _segments():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("hier-"))


def case_sweep():
    rank, world = dist.get_rank(), dist.get_world_size()
    # Twice through the table: the first pass starts what starts lazily (the group's executor thread,
    # torch's own pools); the second must add nothing.
    problems, slowest = _sweep(rank, world)
    threads, segments = _threads(), _segments()
    problems, slowest = _sweep(rank, world)
    if _threads() != threads:
        problems.append(f"threads: {threads} before the second pass, {_threads()} after")
    if _segments() != segments:
        problems.append(f"shared-memory segments: {segments} before the second pass, {_segments()} after")
    assert not problems, f"rank {rank}:\n  " + "\n  ".join(problems)
    return slowest


def _sweep(rank, world):
    problems, slowest = [], 0.0
    for name, who, op, fragment, call in CASES:
        start = time.monotonic()
        try:
            work = call(rank, world)
            work.wait()
            problems.append(f"{name}: no error on rank {rank}")
            continue
        except RuntimeError as e:
            text = str(e).split("\nException raised from")[0]
        finally:
            elapsed = time.monotonic() - start
            slowest = max(slowest, elapsed)
        if callable(op):
            op = op(rank, world)
        match = CONVENTION.search(text)
        if not match or match.group(1) != op:
            problems.append(f"{name}: the error does not follow the convention for '{op}': {text}")
        if elapsed > FAST_S:
            problems.append(f"{name}: the error took {elapsed:.2f} s on rank {rank}")
        if who == DISAGREE:
            if "called different collectives" not in text or "stays usable" not in text:
                problems.append(f"{name}: not reported as a disagreement: {text}")
        elif WHO[who](rank, world):
            if fragment not in text:
                problems.append(f"{name}: expected '{fragment}' in: {text}")
        else:
            refuser = next(r for r in range(world) if WHO[who](r, world))
            if f"rank {refuser} refused this call" not in text or fragment not in text:
                problems.append(f"{name}: expected rank {refuser}'s refusal ('{fragment}') in: {text}")
        t = torch.full((8,), float(rank + 1))
        dist.all_reduce(t)
        if not torch.all(t == world * (world + 1) / 2):
            problems.append(f"{name}: the next allreduce is wrong: {t.tolist()}")
    return problems, slowest


def test_every_rank_raises_at_once_and_the_group_goes_on(pools):
    assert len(CASES) >= 40
    slowest = pools(3).run(case_sweep)
    print(f"{len(CASES)} cases on 3 ranks; slowest failure-to-error {max(slowest) * 1e3:.1f} ms")


def test_across_simulated_hosts(pools):
    # Two hosts: the agreement crosses UCX between hosts; the node steps and sub-groups are untouched.
    slowest = pools(3, layout="AAB").run(case_sweep)
    print(f"{len(CASES)} cases on 2 simulated hosts; slowest failure-to-error {max(slowest) * 1e3:.1f} ms")


def case_calls_that_may_differ_by_rank():
    # Uneven all-to-all: what a rank sends may differ from the others, down to no rows at all; only the
    # size of a row must match. Rank r sends r rows of width 3 to every rank (rank 0 sends nothing).
    rank, world = dist.get_rank(), dist.get_world_size()
    inp = torch.full((rank * world, 3), float(rank))
    out = torch.empty(sum(range(world)), 3)
    dist.all_to_all_single(out, inp, [r for r in range(world)], [rank] * world)
    want = torch.cat([torch.full((r, 3), float(r)) for r in range(world)])
    assert torch.equal(out, want), out
    return "ok"


def test_uneven_all_to_all_with_a_rank_sending_nothing_is_not_a_disagreement(pools):
    assert pools(3).run(case_calls_that_may_differ_by_rank) == ["ok"] * 3


# ---- under TORCH_DISTRIBUTED_DEBUG=DETAIL ----------------------------------------------------------------
# torch wraps every group of a registered backend in its ProcessGroupWrapper, which compares each call's
# op, tensor shapes, dtypes and devices over a Gloo side group before passing it on; hier's agreement
# still checks what the wrapper does not compare (the reduce op, the root) and carries a one-rank refusal
# to the others. On CPU tensors hier always does that; on CUDA tensors only in this mode
# (tests/gpu/test_cuda.py runs this case on the GPU).

DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}


def _raises_on_this_rank(call, pattern):
    start = time.monotonic()
    try:
        call()
    except RuntimeError as e:
        text = str(e).split("\nException raised from")[0]
        assert re.search(pattern, text), f"expected /{pattern}/ in: {text}"
        elapsed = time.monotonic() - start
        assert elapsed < 2 * FAST_S, f"the error took {elapsed:.2f} s"
        return
    raise AssertionError(f"no error on rank {dist.get_rank()} (expected /{pattern}/)")


def case_under_torch_debug_detail():
    """Tensors on the default device (the GPU test sets it)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.get_default_device()
    assert type(dist.group.WORLD._get_backend(device)).__name__ == "_ProcessGroupWrapper"

    def next_allreduce_is_right():
        t = torch.full((1000,), float(rank + 1))
        dist.all_reduce(t)
        assert torch.all(t == world * (world + 1) / 2).item(), t

    next_allreduce_is_right()
    # The wrapper's check: element counts differ.
    _raises_on_this_rank(lambda: dist.all_reduce(torch.ones(10 if rank == 0 else 20)),
                         "Detected mismatch between collectives")
    next_allreduce_is_right()
    # hier's: the reduce ops differ, then the roots.
    _raises_on_this_rank(lambda: dist.all_reduce(torch.ones(10), op=dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM),
                         r"hier: allreduce .*called different collectives.*MAX")
    next_allreduce_is_right()
    _raises_on_this_rank(lambda: dist.broadcast(torch.ones(10), src=rank % 2),
                         r"hier: broadcast .*called different collectives.*root")
    next_allreduce_is_right()
    # hier's: the root alone refuses a scatter list whose tensors do not match the output; the others are told.
    out = torch.empty(4)
    ins = [torch.ones(5) for _ in range(world)]
    _raises_on_this_rank(
        lambda: dist.group.WORLD.scatter([out], [ins] if rank == 0 else [], _opts(dist.ScatterOptions, rootRank=0)).wait(),
        "every input must match" if rank == 0 else "rank 0 refused this call")
    next_allreduce_is_right()
    return "ok"


def test_under_torch_debug_detail(pools):
    assert pools(3, env=DETAIL).run(case_under_torch_debug_detail) == ["ok"] * 3
