"""float16 and bfloat16 near the ends of their range, on every road a reduction can take.

AVG of n values near the largest float16 is representable although their sum is not: hier scales each
term by 1/n before it sums (NCCL's AVG of floats), on one host, across hosts and with uneven hosts. The
other ops must give what Gloo gives on the same inputs, overflow included.
"""

import pytest
import torch
import torch.distributed as dist

NARROW = [torch.float16, torch.bfloat16]
# Two sizes: one the small-message algorithms take, one the pipelined and ring ones take.
COUNTS = [37, 300_001]


def _near_max(dtype, rank, count):
    """Values within 10% of the dtype's largest, different on every rank and element."""
    top = torch.finfo(dtype).max
    spread = (torch.arange(count, dtype=torch.float64) % 7) / 100 + rank / 50
    return (top * (0.9 - spread)).to(dtype)


def _mean_of(dtype, world, count):
    """The mean over ranks, in float64, then rounded once to `dtype`."""
    total = sum(_near_max(dtype, r, count).double() for r in range(world))
    return (total / world).to(dtype)


def _close_to(got, want, what):
    assert torch.isfinite(got.float()).all(), f"{what}: {int((~torch.isfinite(got.float())).sum())} not finite"
    # Each scaled term rounds once in the narrow type, and so does each partial sum.
    rtol = 2e-2 if got.dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=0, msg=what)


def case_average_near_the_top():
    rank, world = dist.get_rank(), dist.get_world_size()
    for dtype in NARROW:
        for count in COUNTS:
            want = _mean_of(dtype, world, count)
            t = _near_max(dtype, rank, count)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            _close_to(t, want, f"all_reduce AVG {dtype} x{count}")
            t = _near_max(dtype, rank, count)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(1.0 / world))
            _close_to(t, want, f"all_reduce PREMUL_SUM(1/n) {dtype} x{count}")
            t = _near_max(dtype, rank, count)
            dist.reduce(t, dst=world - 1, op=dist.ReduceOp.AVG)
            if rank == world - 1:
                _close_to(t, want, f"reduce AVG {dtype} x{count}")
            # reduce_scatter: rank r's input is its values repeated for every output part.
            part = count // world + 1
            whole = torch.cat([_near_max(dtype, rank, part)] * world)
            out = torch.empty(part, dtype=dtype)
            dist.reduce_scatter_tensor(out, whole, op=dist.ReduceOp.AVG)
            _close_to(out, _mean_of(dtype, world, part), f"reduce_scatter_tensor AVG {dtype} x{part}")
            a, b = _near_max(dtype, rank, count), _near_max(dtype, rank, 5)
            dist.all_reduce_coalesced([a, b], op=dist.ReduceOp.AVG)
            _close_to(a, want, f"all_reduce_coalesced AVG {dtype} x{count}")
            _close_to(b, _mean_of(dtype, world, 5), f"all_reduce_coalesced AVG {dtype} x5")
    return "ok"


def case_other_ops_as_gloo():
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]
    for dtype in NARROW:
        for count in COUNTS:
            for op in ops:
                # SUM of values near the top overflows; PRODUCT of values near 2 stays in range until it
                # does not; MAX and MIN of values of both signs near the ends.
                if op == dist.ReduceOp.PRODUCT:
                    base = 1.9 + (torch.arange(count) % 5).double() / 50 + rank / 100
                    values = (base * (1 if rank % 2 else -1)).to(dtype)
                else:
                    values = _near_max(dtype, rank, count) * (1 if op == dist.ReduceOp.SUM or rank % 2 else -1)
                ours, theirs = values.clone(), values.clone()
                dist.all_reduce(ours, op=op)
                dist.all_reduce(theirs, op=op, group=gloo)
                assert torch.equal(ours.isinf(), theirs.isinf()), f"{op} {dtype} x{count}: infinities differ from Gloo's"
                finite = torch.isfinite(theirs.float())
                torch.testing.assert_close(ours[finite].double(), theirs[finite].double(), rtol=1e-2, atol=0)
                if op == dist.ReduceOp.SUM and world > 1:
                    assert ours.isinf().all(), f"SUM {dtype}: near-max values of {world} ranks must overflow"
    dist.destroy_process_group(gloo)
    return "ok"


@pytest.mark.parametrize(
    "layout",
    [
        "AAA",  # one host: shared memory
        "AAABB",  # two uneven hosts: hierarchical schedules
        "ABC",  # one rank per host: the network alone
        "AAB",  # a host of two beside a host of one
    ],
)
def test_narrow_floats_near_their_limits(pools, layout):
    pool = pools(len(layout), layout=layout)
    assert pool.run(case_average_near_the_top) == ["ok"] * len(layout)
    assert pool.run(case_other_ops_as_gloo) == ["ok"] * len(layout)
