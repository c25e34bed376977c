"""Bad input fails at once, on the calling rank, with a message that names the op and the group and says
what to do; and the group stays usable afterwards.

The calls go to the process group object directly where torch's Python layer would reject the input
before hier sees it: these tests are about hier's own checks.
"""

import re

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions

# hier: <op> on group '<name>' (seq <n>, rank <r>/<size>): <what is wrong>
CONVENTION = re.compile(r"hier: (\S+) on group '[^']+' \((p2p )?seq \d+, rank \d+/\d+(, peer \S+, tag \d+)?\): .+")


def _refused(fn, op, fragment):
    try:
        fn()
    except RuntimeError as e:
        text = str(e).split("\nException raised from")[0]
        match = CONVENTION.search(text)
        assert match, f"{op}: the message does not follow the convention: {text}"
        assert match.group(1) == op, f"{op}: the message names op '{match.group(1)}': {text}"
        assert fragment in text, f"{op}: expected '{fragment}' in: {text}"
        return text
    raise AssertionError(f"{op}: bad input was accepted ({fragment})")


def _still_usable():
    t = torch.ones(16)
    dist.all_reduce(t)
    assert torch.all(t == dist.get_world_size()), "the group no longer works after refusing bad input"


def _opts(cls, **fields):
    opts = cls()
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


def case_bad_inputs():
    world, rank = dist.get_world_size(), dist.get_rank()
    pg = dist.group.WORLD
    backend = pg._get_backend(torch.device("cpu"))
    t = torch.ones(8)
    checks = [
        # Mismatched tensor counts.
        (lambda: pg.allreduce([t, t.clone()]), "allreduce", "expects exactly one tensor"),
        (lambda: pg.allgather([[torch.empty(8)] * (world + 1)], [t]), "allgather", "needs one output tensor per rank"),
        (lambda: pg.alltoall([torch.empty(1)] * (world + 1), [torch.empty(1)] * world), "all_to_all", "one input and one output tensor per rank"),
        # Split sizes that do not add up.
        (lambda: dist.all_to_all_single(torch.empty(world, 2), torch.empty(world, 2), [1] * world, [2] * world),
         "all_to_all_single", "split sizes add up to"),
        (lambda: dist.all_to_all_single(torch.empty(world), torch.empty(world + 1)), "all_to_all_single", "must divide evenly"),
        (lambda: dist.all_to_all_single(torch.empty(world), torch.empty(world), [1] * (world + 1), [1] * world),
         "all_to_all_single", "split per rank"),
        # Output of the wrong size.
        (lambda: dist.all_gather_into_tensor(torch.empty(8 * world + 1), t), "all_gather_into_tensor", "must hold group size"),
        (lambda: dist.reduce_scatter_tensor(torch.empty(8), torch.empty(8 * world + 3)), "reduce_scatter_tensor", "must hold group size"),
        # Mixed dtypes.
        (lambda: pg.allgather([[torch.empty(8, dtype=torch.int32) for _ in range(world)]], [t]), "allgather", "differs from the input"),
        (lambda: pg._allgather_base(torch.empty(8 * world, dtype=torch.float64), t), "all_gather_into_tensor", "differs from the input"),
        (lambda: pg.allgather_coalesced([[torch.empty(8, dtype=torch.int64)] for _ in range(world)], [t]),
         "allgather_coalesced", "must match its input"),
        (lambda: pg.allgather_coalesced([[torch.empty(8)] for _ in range(world + 1)], [t]), "allgather_coalesced",
         "one list of outputs per rank"),
        # (to the backend itself: torch's dispatcher answers a call without tensors before asking the backend)
        (lambda: backend.allgather_coalesced([[] for _ in range(world)], [], AllgatherOptions()),
         "allgather_coalesced", "no input tensors"),
        # Root out of range.
        (lambda: pg.broadcast([t], _opts(dist.BroadcastOptions, rootRank=world)), "broadcast", "root rank"),
        (lambda: pg.reduce([t], _opts(dist.ReduceOptions, rootRank=-1)), "reduce", "root rank"),
        # A device hier does not carry (a CUDA tensor meets the same check; this box has no GPU).
        (lambda: backend.allreduce([torch.empty(4, device="meta")], dist.AllreduceOptions()), "allreduce", "not supported"),
        # An op that does not apply to the dtype.
        (lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND), "allreduce", "bitwise operation"),
        (lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)), "allreduce", "PREMUL_SUM"),
        (lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint16)), "allreduce", "cannot reduce"),
        (lambda: dist.reduce_scatter(torch.empty(2), [torch.empty(2)] * world, op=dist.ReduceOp.BXOR), "reduce_scatter", "bitwise operation"),
        # Sparse tensors are summed only (as with Gloo).
        (lambda: dist.all_reduce(torch.ones(4).to_sparse(), op=dist.ReduceOp.MAX), "allreduce", "summed only"),
        # Point to point with impossible peers and tags.
        (lambda: pg.send([t], world, 0), "send", "outside the group"),
        (lambda: pg.send([t], rank, 0), "send", "itself"),
        (lambda: pg.recv([t], (rank + 1) % world if world > 1 else world, 1 << 30), "recv", "tag"),
        (lambda: pg.recv([torch.empty(4, 4).t()], (rank + 1) % max(world, 1), 0), "recv", "not contiguous"),
    ]
    if world == 1:
        # With one rank every peer is this rank or outside the group: check those two only.
        checks = [c for c in checks if c[1] not in ("recv",)]
    for fn, op, fragment in checks:
        _refused(fn, op, fragment)
        _still_usable()


def test_bad_input_is_refused_clearly_and_the_group_stays_usable(pools):
    pools(2).run(case_bad_inputs)
    pools(3).run(case_bad_inputs)


def case_error_names_the_group():
    group = dist.new_group(list(range(dist.get_world_size())))
    text = _refused(lambda: dist.all_gather_into_tensor(torch.empty(3), torch.empty(2), group=group), "all_gather_into_tensor", "must hold")
    name = dist.distributed_c10d._get_process_group_name(group)
    assert f"on group '{name}'" in text, f"the message names another group than '{name}': {text}"
    dist.destroy_process_group(group)


def test_errors_name_the_group_they_happened_in(pools):
    pools(2).run(case_error_names_the_group)


def test_autoload_failure_warns_instead_of_breaking_import(monkeypatch):
    import _torch_hier_autoload
    from torch_hier import _registration

    def broken():
        raise RuntimeError("simulated registration failure")

    monkeypatch.setattr(_registration, "register", broken)
    with pytest.warns(UserWarning, match="could not register the 'hier' backend: simulated registration failure"):
        _torch_hier_autoload.autoload()
