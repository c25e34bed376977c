"""torch's functional collective layer on hier groups, on 1 to 4 real processes.

The ops of ``torch.ops._c10d_functional`` (what DTensor, tensor parallelism and torch.compile emit), their
autograd forms, the Python API of ``torch.distributed._functional_collectives`` with every way of naming
a group, ``_dtensor::shard_dim_alltoall`` and ``torch.distributed.nn.functional``. Every result and every
gradient is checked against what the rank computes locally from every rank's (reproducible) input.
"""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.nn.functional as dist_nn
from torch.distributed.device_mesh import init_device_mesh

from harness import TORCH_RELEASE
from reference import Failures, check_equal, contribution, expected_reduction, supported

c10d = torch.ops._c10d_functional
c10d_autograd = torch.ops._c10d_functional_autograd

# The reductions the functional ops take, by name (PREMUL_SUM is not among them).
FUNCTIONAL_OPS = ["sum", "avg", "product", "min", "max", "band", "bor", "bxor"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
          torch.uint8, torch.bool, torch.complex64]
# Element counts per rank: one, a few, and enough for the ring and shared-memory algorithms.
NUMELS = [1, 7, 40000]


def _functional_supported(op, dtype):
    if dtype.is_complex:
        return op in ("sum", "avg")  # the functional layer reduces complex tensors as pairs of reals
    return supported(op.upper(), dtype)


def _inputs(numel, dtype, seed, op="sum"):
    return [contribution(r, numel, dtype, seed, op.upper()) for r in range(dist.get_world_size())]


def _wait_all(tensors):
    """wait_tensors (torch 2.15 on), or wait_tensor on each tensor (before: there is no wait_tensors)."""
    if TORCH_RELEASE >= (2, 15):
        return c10d.wait_tensors(tensors)
    return [c10d.wait_tensor(t) for t in tensors]


def _groups():
    """The two spellings of a group the ops take: its registered name and the group itself (the group
    itself from torch 2.12 on: torch 2.11's ops take a `str group_name` only)."""
    if TORCH_RELEASE < (2, 12):
        return [dist.group.WORLD.group_name]
    return [dist.group.WORLD.group_name, dist.group.WORLD]


# ---- the ops -----------------------------------------------------------------------------------------


def case_all_reduce(seed):
    rank, failures = dist.get_rank(), Failures()
    for g, group in enumerate(_groups()):
        for dtype in DTYPES:
            for op in FUNCTIONAL_OPS:
                if not _functional_supported(op, dtype):
                    continue
                for numel in NUMELS:
                    inputs = _inputs(numel, dtype, seed + numel + g, op)
                    expected = expected_reduction(inputs, op.upper(), dtype)
                    what = f"all_reduce {op} {dtype} x{numel} ({type(group).__name__})"
                    mine = inputs[rank].clone()
                    out = c10d.wait_tensor(c10d.all_reduce(mine, op, group))
                    failures.check(check_equal, out, expected, what)
                    failures.check(check_equal, mine, inputs[rank], what + ": the input changed")
                    inplace = inputs[rank].clone()
                    returned = c10d.all_reduce_(inplace, op, group)
                    c10d.wait_tensor(returned)
                    failures.check(check_equal, inplace, expected, what + " in place")
    failures.raise_if_any(rank)


def case_coalesced(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    name = dist.group.WORLD.group_name
    for dtype in [torch.float32, torch.bfloat16, torch.int64]:
        a, b = _inputs(5, dtype, seed), _inputs(3000, dtype, seed + 1)
        outs = _wait_all(c10d.all_reduce_coalesced([a[rank], b[rank]], "sum", name))
        failures.check(check_equal, outs[0], expected_reduction(a, "SUM", dtype), f"all_reduce_coalesced {dtype} [0]")
        failures.check(check_equal, outs[1], expected_reduction(b, "SUM", dtype), f"all_reduce_coalesced {dtype} [1]")
        x, y = a[rank].clone(), b[rank].clone()
        _wait_all(c10d.all_reduce_coalesced_([x, y], "max", name))
        failures.check(check_equal, x, expected_reduction(a, "MAX", dtype), f"all_reduce_coalesced_ {dtype} [0]")
        failures.check(check_equal, y, expected_reduction(b, "MAX", dtype), f"all_reduce_coalesced_ {dtype} [1]")

        gathered = _wait_all(c10d.all_gather_into_tensor_coalesced([a[rank], b[rank]], world, name))
        failures.check(check_equal, gathered[0], torch.cat(a), f"all_gather_into_tensor_coalesced {dtype} [0]")
        failures.check(check_equal, gathered[1], torch.cat(b), f"all_gather_into_tensor_coalesced {dtype} [1]")

        # Reduce-scatter: every rank's input holds one block per rank.
        c, d = _inputs(4 * world, dtype, seed + 2), _inputs(1000 * world, dtype, seed + 3)
        scattered = _wait_all(c10d.reduce_scatter_tensor_coalesced([c[rank], d[rank]], "sum", world, name))
        failures.check(check_equal, scattered[0], expected_reduction(c, "SUM", dtype).chunk(world)[rank],
                       f"reduce_scatter_tensor_coalesced {dtype} [0]")
        failures.check(check_equal, scattered[1], expected_reduction(d, "SUM", dtype).chunk(world)[rank],
                       f"reduce_scatter_tensor_coalesced {dtype} [1]")
    failures.raise_if_any(rank)


def case_gather_and_scatter(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    for group in _groups():
        for dtype in DTYPES:
            for numel in NUMELS:
                what = f"{dtype} x{numel}"
                inputs = [t.reshape(numel, 1) for t in _inputs(numel, dtype, seed + numel)]
                gathered = c10d.wait_tensor(c10d.all_gather_into_tensor(inputs[rank], world, group))
                failures.check(check_equal, gathered, torch.cat(inputs), "all_gather_into_tensor " + what)
                out = torch.empty(world * numel, 1, dtype=dtype)
                returned = c10d.all_gather_into_tensor_out(inputs[rank], world, group, out=out)
                c10d.wait_tensor(returned)
                failures.check(check_equal, out, torch.cat(inputs), "all_gather_into_tensor_out " + what)

                for op in ["sum", "avg", "max"]:
                    if not _functional_supported(op, dtype):
                        continue
                    blocks = _inputs(numel * world, dtype, seed + numel + 7, op)
                    expected = expected_reduction(blocks, op.upper(), dtype).chunk(world)[rank]
                    got = c10d.wait_tensor(c10d.reduce_scatter_tensor(blocks[rank], op, world, group))
                    failures.check(check_equal, got, expected, f"reduce_scatter_tensor {op} " + what)
                    out = torch.empty(numel, dtype=dtype)
                    c10d.wait_tensor(c10d.reduce_scatter_tensor_out(blocks[rank], op, world, group, out=out))
                    failures.check(check_equal, out, expected, f"reduce_scatter_tensor_out {op} " + what)
    failures.raise_if_any(rank)


def _uneven_splits(world):
    """Rows rank s sends to rank d: s + d + 1 (every rank knows every split)."""
    return lambda s, d: s + d + 1


def case_all_to_all_and_broadcast(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    rows = _uneven_splits(world)
    for group in _groups():
        for dtype in DTYPES:
            # Uneven splits: rank s's input is its rows for rank 0, then for rank 1, ...; the output is
            # what every rank sent to this one, in rank order.
            sent = [contribution(s, sum(rows(s, d) for d in range(world)) * 3, dtype, seed + s).reshape(-1, 3)
                    for s in range(world)]
            in_splits = [rows(rank, d) for d in range(world)]
            out_splits = [rows(s, rank) for s in range(world)]
            expected = torch.cat([sent[s].split([rows(s, d) for d in range(world)])[rank] for s in range(world)])
            got = c10d.wait_tensor(c10d.all_to_all_single(sent[rank], out_splits, in_splits, group))
            failures.check(check_equal, got, expected, f"all_to_all_single uneven {dtype}")
            # Even splits, the default of the Python API.
            even = [contribution(s, 4 * world, dtype, seed + 50 + s) for s in range(world)]
            got = c10d.wait_tensor(c10d.all_to_all_single(even[rank], [4] * world, [4] * world, group))
            expected = torch.cat([even[s].chunk(world)[rank] for s in range(world)])
            failures.check(check_equal, got, expected, f"all_to_all_single even {dtype}")

            for numel in NUMELS:
                src = world - 1
                data = contribution(src, numel, dtype, seed + numel)
                mine = data.clone() if rank == src else torch.zeros(numel, dtype=dtype)
                got = c10d.wait_tensor(c10d.broadcast(mine, src, group))
                failures.check(check_equal, got, data, f"broadcast {dtype} x{numel}")
                mine = data.clone() if rank == src else torch.zeros(numel, dtype=dtype)
                c10d.wait_tensor(c10d.broadcast_(mine, src, group))
                failures.check(check_equal, mine, data, f"broadcast_ {dtype} x{numel}")
    failures.raise_if_any(rank)


def case_point_to_point(seed):
    """The functional send/receive ops: a ring, every rank sends to the next and receives from the previous."""
    rank, world = dist.get_rank(), dist.get_world_size()
    name = dist.group.WORLD.group_name
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    data = [contribution(r, 1000, torch.float32, seed + r) for r in range(world)]
    buf = torch.empty(1000)
    sent = c10d.isend(data[rank], nxt, 0, name)
    got = c10d.irecv(buf, prev, 0, name)
    _wait_all([sent, got])
    check_equal(got, data[prev], "isend/irecv")
    buf2 = torch.empty(1000)
    outs = c10d.batch_p2p_ops(["isend", "irecv"], [nxt, prev], [1, 1], [data[rank], buf2], name)
    _wait_all(outs)
    check_equal(buf2, data[prev], "batch_p2p_ops")


def case_wait_semantics():
    """Each output is paired with its Work until wait_tensor; the Work table sees it waited for."""
    import torch_hier

    registry_size = torch._C._distributed_c10d._get_work_registry_size
    name = dist.group.WORLD.group_name
    before = registry_size()
    outs = [c10d.all_reduce(torch.ones(1000), "sum", name) for _ in range(4)]
    assert registry_size() == before + 4, (before, registry_size())
    for out in reversed(outs):  # in any order
        c10d.wait_tensor(out)
    assert registry_size() == before
    c10d.wait_tensor(outs[0])  # a second wait on the same tensor is harmless
    table = torch_hier.work_table(format="json")
    import json

    rows = json.loads(table)["live"]
    assert not [r for r in rows if not r["waited"] and r["op"] == "allreduce"], table
    # Inside allow_inflight_collective_as_graph_input_ctx, eager collectives register their Work too, and
    # waiting on the Work takes it out again.
    with funcol.allow_inflight_collective_as_graph_input_ctx():
        t = torch.ones(10)
        work = dist.all_reduce(t, async_op=True)
        assert registry_size() == before + 1
        work.wait()
        assert registry_size() == before, "Work.wait() must unregister the work"
        work.wait()  # idempotent
    assert torch.all(t == dist.get_world_size())


# ---- autograd ----------------------------------------------------------------------------------------


def case_autograd_ops(seed):
    """all_gather's backward is a reduce-scatter, reduce_scatter's an all-gather, all_to_all_single's the
    all-to-all with the splits swapped: checked through the gradients of weighted sums."""
    rank, world = dist.get_rank(), dist.get_world_size()
    name = dist.group.WORLD.group_name
    n = 6
    x = [contribution(r, n, torch.float64, seed + r) for r in range(world)]
    w = [contribution(r, n * world, torch.float64, seed + 100 + r) for r in range(world)]

    mine = x[rank].clone().requires_grad_()
    y = c10d.wait_tensor(c10d_autograd.all_gather_into_tensor(mine, world, name))
    check_equal(y.detach(), torch.cat(x), "autograd all_gather forward")
    (y * w[rank]).sum().backward()
    check_equal(mine.grad, sum(wr.chunk(world)[rank] for wr in w), "all_gather backward (a reduce-scatter)")

    big = [contribution(r, n * world, torch.float64, seed + 200 + r) for r in range(world)]
    mine = big[rank].clone().requires_grad_()
    y = c10d.wait_tensor(c10d_autograd.reduce_scatter_tensor(mine, "sum", world, name))
    check_equal(y.detach(), sum(b.chunk(world)[rank] for b in big), "autograd reduce_scatter forward")
    v = [contribution(r, n, torch.float64, seed + 300 + r) for r in range(world)]
    (y * v[rank]).sum().backward()
    check_equal(mine.grad, torch.cat(v), "reduce_scatter backward (an all-gather)")

    rows = _uneven_splits(world)
    sent = [contribution(s, sum(rows(s, d) for d in range(world)), torch.float64, seed + 400 + s)
            for s in range(world)]
    in_splits = [rows(rank, d) for d in range(world)]
    out_splits = [rows(s, rank) for s in range(world)]
    mine = sent[rank].clone().requires_grad_()
    y = c10d.wait_tensor(c10d_autograd.all_to_all_single(mine, out_splits, in_splits, name))
    # The weight of each received element, as every rank can compute for every other rank.
    weights = [contribution(d, sum(rows(s, d) for s in range(world)), torch.float64, seed + 500 + d)
               for d in range(world)]
    (y * weights[rank]).sum().backward()
    # The gradient of what this rank sent to rank d is d's weights for the rows that came from here.
    expected = torch.cat([weights[d].split([rows(s, d) for s in range(world)])[rank] for d in range(world)])
    check_equal(mine.grad, expected, "all_to_all_single backward (splits swapped)")


# ---- the Python API ----------------------------------------------------------------------------------


def _group_spellings():
    """Every way the Python API takes a group that spans all ranks: the group, its name, a 1-D mesh."""
    world = dist.get_world_size()
    spellings = {
        "ProcessGroup": dist.group.WORLD,
        "name": dist.group.WORLD.group_name,
        "DeviceMesh": init_device_mesh("cpu", (world,)),
    }
    return spellings


def case_python_api(seed):
    rank, world, failures = dist.get_rank(), dist.get_world_size(), Failures()
    registry_size = torch._C._distributed_c10d._get_work_registry_size
    for how, group in _group_spellings().items():
        x = _inputs(2000, torch.float32, seed)
        before = registry_size()
        y = funcol.all_reduce(x[rank], "sum", group)
        # An AsyncCollectiveTensor: its work is in flight (or done but not waited for) until first use.
        if world > 1:
            assert isinstance(y, funcol.AsyncCollectiveTensor), type(y)
            assert registry_size() == before + 1
        z = y * 1  # first use waits
        assert registry_size() == before
        failures.check(check_equal, z, expected_reduction(x, "SUM", torch.float32), f"all_reduce via {how}")

        m = [t.reshape(40, 50) for t in x]
        g = funcol.all_gather_tensor(m[rank], 1, group)  # along a non-leading dim
        failures.check(check_equal, g * 1, torch.cat(m, dim=1), f"all_gather_tensor dim 1 via {how}")
        if TORCH_RELEASE >= (2, 13):  # the `_single` names came in torch 2.13 (all_gather_tensor before)
            g = funcol.all_gather_single(m[rank], 0, group)
            failures.check(check_equal, g * 1, torch.cat(m, dim=0), f"all_gather_single via {how}")

        blocks = [t.reshape(20, 100).repeat(1, world) for t in x]  # dim 1 holds one block per rank
        r = funcol.reduce_scatter_tensor(blocks[rank], "sum", 1, group)
        expected = expected_reduction(blocks, "SUM", torch.float32).chunk(world, dim=1)[rank]
        failures.check(check_equal, r * 1, expected, f"reduce_scatter_tensor dim 1 via {how}")
        if TORCH_RELEASE >= (2, 13):
            r = funcol.reduce_scatter_single(blocks[rank], "max", 1, group)
            expected = expected_reduction(blocks, "MAX", torch.float32).chunk(world, dim=1)[rank]
            failures.check(check_equal, r * 1, expected, f"reduce_scatter_single max via {how}")

        even = [contribution(s, 3 * world, torch.float32, seed + s) for s in range(world)]
        a = funcol.all_to_all_single(even[rank], None, None, group)
        expected = torch.cat([even[s].chunk(world)[rank] for s in range(world)])
        failures.check(check_equal, a * 1, expected, f"all_to_all_single via {how}")

        b = funcol.broadcast(x[0] if rank == 0 else torch.zeros(2000), 0, group)
        failures.check(check_equal, b * 1, x[0], f"broadcast via {how}")

        # permute_tensor: rank s sends to rank (s + 1) % world. (torch's permute_tensor takes no group name.)
        p = funcol.permute_tensor(x[rank], [(s + 1) % world for s in range(world)],
                                  dist.group.WORLD if how == "name" else group)
        failures.check(check_equal, p * 1, x[(rank - 1) % world], f"permute_tensor via {how}")

        outs = funcol.all_reduce_coalesced([x[rank], x[rank][:7]], "max", group)
        expected = expected_reduction(x, "MAX", torch.float32)
        failures.check(check_equal, outs[0] * 1, expected, f"all_reduce_coalesced via {how}")
        failures.check(check_equal, outs[1] * 1, expected[:7], f"all_reduce_coalesced [1] via {how}")
        outs = funcol.all_gather_into_tensor_coalesced([x[rank], x[rank][:5]], group)
        failures.check(check_equal, outs[1] * 1, torch.cat([t[:5] for t in x]), f"all_gather coalesced via {how}")
        outs = funcol.reduce_scatter_tensor_coalesced([blocks[rank]], "sum", [1], group)
        expected = expected_reduction(blocks, "SUM", torch.float32).chunk(world, dim=1)[rank]
        failures.check(check_equal, outs[0] * 1, expected, f"reduce_scatter coalesced via {how}")

        # The autograd variants of the Python API.
        leaf = x[rank].clone().requires_grad_()
        gathered = funcol.all_gather_tensor_autograd(leaf, 0, group)
        (gathered * torch.arange(2000 * world, dtype=torch.float32)).sum().backward()
        # Every rank weights the gathered tensor the same way: this rank's block, world times.
        expected = torch.arange(2000 * world, dtype=torch.float32).chunk(world)[rank] * world
        failures.check(check_equal, leaf.grad, expected, f"all_gather_tensor_autograd backward via {how}")
    failures.raise_if_any(rank)


def case_mesh_dimensions(seed):
    """A 2 x 2 mesh of hier groups; each (mesh, dim) names the group along one dimension."""
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    row, col = divmod(rank, 2)
    x = [contribution(r, 1000, torch.int64, seed + r) for r in range(4)]
    # Along dim 0 ("dp"): ranks with the same column; along dim 1 ("tp"): the same row.
    along_dp = funcol.all_reduce(x[rank], "sum", (mesh, 0)) * 1
    check_equal(along_dp, x[col] + x[2 + col], "all_reduce over (mesh, 0)")
    along_tp = funcol.all_reduce(x[rank], "sum", (mesh, 1)) * 1
    check_equal(along_tp, x[2 * row] + x[2 * row + 1], "all_reduce over (mesh, 1)")
    by_name = funcol.all_gather_tensor(x[rank], 0, mesh["tp"]) * 1
    check_equal(by_name, torch.cat([x[2 * row], x[2 * row + 1]]), "all_gather over mesh['tp']")
    for dim in (0, 1):
        group = mesh.get_group(dim)
        assert group._get_backend(torch.device("cpu")).__class__.__name__ == "ProcessGroupHier", dim


def case_shard_dim_alltoall(seed):
    """DTensor's Shard(i) -> Shard(j): the global tensor's rows sharded in, its columns sharded out."""
    rank, world = dist.get_rank(), dist.get_world_size()
    name = dist.group.WORLD.group_name
    whole = contribution(0, 30 * world**3, torch.float32, seed).reshape(3 * world, 5 * world, 2 * world)
    for gather_dim, shard_dim in [(0, 1), (1, 0), (0, 2), (2, 1)]:
        mine = whole.chunk(world, dim=gather_dim)[rank].contiguous()
        got = torch.ops._dtensor.shard_dim_alltoall(mine, gather_dim, shard_dim, name)
        got = c10d.wait_tensor(got)
        check_equal(got, whole.chunk(world, dim=shard_dim)[rank], f"shard_dim_alltoall {gather_dim}->{shard_dim}")


def case_nn_functional(seed):
    """torch.distributed.nn.functional: collectives with gradients."""
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 5
    x = [contribution(r, n, torch.float64, seed + r) for r in range(world)]
    w = [contribution(r, n, torch.float64, seed + 50 + r) for r in range(world)]

    leaf = x[rank].clone().requires_grad_()
    y = dist_nn.all_reduce(leaf)
    check_equal(y.detach(), sum(x), "nn all_reduce")
    (y * w[rank]).sum().backward()
    check_equal(leaf.grad, sum(w), "nn all_reduce backward")

    leaf = x[rank].clone().requires_grad_()
    parts = dist_nn.all_gather(leaf)
    for r in range(world):
        check_equal(parts[r].detach(), x[r], f"nn all_gather [{r}]")
    sum((p * w[rank]).sum() for p in parts).backward()
    check_equal(leaf.grad, sum(w), "nn all_gather backward")

    leaf = x[rank].clone().requires_grad_()
    out = dist_nn.broadcast(leaf, src=0)
    check_equal(out.detach(), x[0], "nn broadcast")
    (out * w[rank]).sum().backward()
    check_equal(leaf.grad, sum(w) if rank == 0 else torch.zeros(n, dtype=torch.float64), "nn broadcast backward")

    leaf = x[rank].clone().requires_grad_()
    out = dist_nn.reduce(leaf, dst=0)
    if rank == 0:
        check_equal(out.detach(), sum(x), "nn reduce")
    (out * w[rank]).sum().backward()
    check_equal(leaf.grad, w[0], "nn reduce backward (the root's gradient, broadcast)")

    chunks = [[contribution(r, n, torch.float64, seed + 100 + r * world + d) for d in range(world)]
              for r in range(world)]
    leaves = [c.clone().requires_grad_() for c in chunks[rank]]
    out = torch.empty(n, dtype=torch.float64)
    out = dist_nn.reduce_scatter(out, leaves)
    check_equal(out.detach(), sum(chunks[r][rank] for r in range(world)), "nn reduce_scatter")
    (out * w[rank]).sum().backward()
    for d in range(world):
        check_equal(leaves[d].grad, w[d], f"nn reduce_scatter backward [{d}]")

    leaves = [c.clone().requires_grad_() for c in chunks[rank]]
    outs = dist_nn.all_to_all([torch.empty(n, dtype=torch.float64) for _ in range(world)], leaves)
    for s in range(world):
        check_equal(outs[s].detach(), chunks[s][rank], f"nn all_to_all [{s}]")
    sum((o * w[rank]).sum() for o in outs).backward()
    for d in range(world):
        check_equal(leaves[d].grad, w[d], f"nn all_to_all backward [{d}]")

    flat = torch.cat(chunks[rank]).requires_grad_()
    out = dist_nn.all_to_all_single(torch.empty(n * world, dtype=torch.float64), flat)
    check_equal(out.detach(), torch.cat([chunks[s][rank] for s in range(world)]), "nn all_to_all_single")
    (out * torch.cat([w[rank]] * world)).sum().backward()
    check_equal(flat.grad, torch.cat(w), "nn all_to_all_single backward")

    # Every rank passes tensors of the right size; only the source's are sent.
    leaves = [c.clone().requires_grad_() for c in chunks[rank]]
    out = dist_nn.scatter(leaves, src=0)
    check_equal(out.detach(), chunks[0][rank], "nn scatter")
    (out * w[rank]).sum().backward()
    if rank == 0:
        for d in range(world):
            check_equal(leaves[d].grad, w[d], f"nn scatter backward [{d}]")

    leaf = x[rank].clone().requires_grad_()
    outs = dist_nn.gather(leaf, dst=0)
    if rank == 0:
        for r in range(world):
            check_equal(outs[r].detach(), x[r], f"nn gather [{r}]")
    sum((o * w[rank]).sum() for o in outs).backward()
    check_equal(leaf.grad, w[0], "nn gather backward")


# ---- pytest ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_functional_ops(pools, world_size):
    pool = pools(world_size)
    pool.run(case_all_reduce, 1)
    pool.run(case_coalesced, 2)
    pool.run(case_gather_and_scatter, 3)
    pool.run(case_all_to_all_and_broadcast, 4)
    pool.run(case_wait_semantics)


@pytest.mark.skipif(TORCH_RELEASE < (2, 12), reason=f"torch {torch.__version__} has no functional send/receive "
                    "ops (torch.ops._c10d_functional.isend, irecv and batch_p2p_ops came in torch 2.12)")
@pytest.mark.parametrize("world_size", [2, 3])
def test_functional_point_to_point(pools, world_size):
    pools(world_size).run(case_point_to_point, 5)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_autograd_ops_and_nn_functional(pools, world_size):
    pool = pools(world_size)
    pool.run(case_autograd_ops, 6)
    pool.run(case_nn_functional, 7)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_python_api_and_shard_dim_alltoall(pools, world_size):
    pool = pools(world_size)
    pool.run(case_python_api, 8)
    pool.run(case_shard_dim_alltoall, 9)


def test_mesh_dimensions(pools):
    pools(4).run(case_mesh_dimensions, 10)
