"""torch's own clients of a process group that Gloo (or NCCL) serves and hier must serve too (issue 12):
monitored_barrier, split_group and DeviceMesh, gather_single, sparse allreduce and DDP with sparse
gradients, the profiler. Results are checked against local references."""

import inspect
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from harness import run_job

# torch before 2.15 refuses monitored_barrier in Python for every backend not named "gloo".
MONITORED_BARRIER_GLOO_ONLY = "Backend.GLOO" in inspect.getsource(dist.monitored_barrier)
needs_monitored_barrier = pytest.mark.skipif(
    MONITORED_BARRIER_GLOO_ONLY,
    reason=f"torch {torch.__version__} allows monitored_barrier on backends named 'gloo' only (its Python checks the name)",
)


def _error(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e).split("\nException raised from")[0]
    raise AssertionError("the monitored barrier passed although a rank stayed away")


def case_monitored_barrier():
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = timedelta(seconds=1)

    def check_collectives_in_step():
        t = torch.full((10,), float(rank))
        dist.all_reduce(t)
        assert torch.all(t == sum(range(world))), t

    # Everyone comes: it passes, with and without wait_all_ranks, between collectives that stay in step.
    for wait_all in (False, True, False):
        check_collectives_in_step()
        dist.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all)
    check_collectives_in_step()

    # Rank 1 stays away: rank 0 names it; the others say rank 0 did not answer.
    if rank == 1:
        time.sleep(2)
    elif rank == 0:
        text = _error(lambda: dist.monitored_barrier(timeout=timeout))
        assert "Rank 1 failed to pass monitoredBarrier in 1000 ms" in text, text
    else:
        text = _error(lambda: dist.monitored_barrier(timeout=timeout))
        assert f"Rank {rank} successfully reached monitoredBarrier, but received errors" in text, text
    # The group is still usable, and a monitored barrier everyone comes to passes again.
    check_collectives_in_step()
    dist.monitored_barrier(timeout=timedelta(seconds=5))

    # Every rank but 0 stays away; with wait_all_ranks rank 0 names them all.
    if rank == 0:
        text = _error(lambda: dist.monitored_barrier(timeout=timeout, wait_all_ranks=True))
        names = ", ".join(str(r) for r in range(1, world))
        assert f"Ranks {names} failed to pass monitoredBarrier" in text, text
    else:
        time.sleep(1.5)
    check_collectives_in_step()

    # On a subgroup of ranks 0 and 2; the others are not in it and return at once.
    sub = dist.new_group([0, 2])
    start = time.monotonic()
    dist.monitored_barrier(sub, timeout=timeout)  # rank 1 is not a member: it returns at once
    assert rank != 1 or time.monotonic() - start < 0.5
    # A timeout of zero fails on rank 0 at once.
    if rank == 0:
        text = _error(lambda: dist.group.WORLD.monitored_barrier(timedelta(seconds=0)))
        assert "Rank 0 timed out in monitoredBarrier" in text, text
    check_collectives_in_step()
    return "ok"


@needs_monitored_barrier
def test_monitored_barrier_names_the_ranks_that_did_not_come():
    assert run_job(3, case_monitored_barrier, timeout_s=20) == ["ok"] * 3


def case_split_group():
    rank, world = dist.get_rank(), dist.get_world_size()
    halves = [[0, 1], [2, 3]]
    sub = dist.split_group(split_ranks=halves, timeout=timedelta(seconds=20))
    mine = halves[rank // 2]
    assert dist.get_process_group_ranks(sub) == mine
    assert dist.get_backend(sub) == "hier"
    t = torch.full((1 << 16,), float(rank))
    dist.all_reduce(t, group=sub)
    assert torch.all(t == sum(mine)), t[:3]
    out = torch.empty(2 * 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)), group=sub)
    assert torch.equal(out, torch.tensor(mine).float().repeat_interleave(3))
    # A split of some ranks only: the others get no group and are not involved.
    odd = dist.split_group(split_ranks=[[1, 3]])
    if rank in (1, 3):
        t = torch.ones(4)
        dist.all_reduce(t, group=odd)
        assert torch.all(t == 2)
    else:
        assert odd is dist.GroupMember.NON_GROUP_MEMBER, odd
    # The parent goes on, in step.
    t = torch.ones(8)
    dist.all_reduce(t)
    assert torch.all(t == world)
    # A 2 x 2 device mesh and its dimensions' groups.
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        members = dist.get_process_group_ranks(group)
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=group)
        assert torch.all(t == sum(members)), (dim, members, t)
    return "ok"


def test_split_group_and_device_mesh_run_on_hier():
    assert run_job(4, case_split_group, timeout_s=30) == ["ok"] * 4


def case_gather_single():
    rank, world = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for dst in range(world):
            x = (torch.arange(6) + 10 * rank).to(dtype).reshape(2, 3)
            out = torch.empty(world, 2, 3, dtype=dtype) if rank == dst else None
            dist.gather_single(x, out, dst=dst)
            if rank == dst:
                expected = torch.stack([(torch.arange(6) + 10 * r).to(dtype).reshape(2, 3) for r in range(world)])
                assert torch.equal(out, expected), (dtype, dst, out)
    # A flat output, asynchronously, and an empty input.
    out = torch.empty(world * 4) if rank == 0 else None
    work = dist.gather_single(torch.full((4,), float(rank)), out, dst=0, async_op=True)
    work.wait()
    if rank == 0:
        assert torch.equal(out, torch.arange(world).float().repeat_interleave(4))
    dist.gather_single(torch.empty(0), torch.empty(0) if rank == 0 else None, dst=0)
    # The root's output has the wrong size: every rank raises, naming the root's reason; the group goes on.
    out = torch.empty(world * 4 + 1) if rank == 0 else None
    try:
        dist.gather_single(torch.ones(4), out, dst=0)
        raise AssertionError("gather_single took an output of the wrong size")
    except RuntimeError as e:
        assert "gather_single" in str(e) and "elements" in str(e), str(e)
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == world)
    return "ok"


@pytest.mark.skipif(not hasattr(dist, "gather_single"), reason=f"torch {torch.__version__} has no dist.gather_single")
def test_gather_single_fills_the_roots_one_output():
    assert run_job(3, case_gather_single, timeout_s=20) == ["ok"] * 3


def _sparse_of(r, dtype=torch.float32):
    """Rank r's sparse tensor, the same on every rank that computes it: overlapping and distinct rows."""
    g = torch.Generator().manual_seed(100 + r)
    rows = torch.randint(0, 12, (5 + r,), generator=g)
    values = torch.randn(5 + r, 3, generator=g).to(dtype)
    return torch.sparse_coo_tensor(rows.unsqueeze(0), values, (12, 3))


def case_sparse_allreduce():
    rank, world = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.float32, torch.float64, torch.int64):
        t = _sparse_of(rank, dtype)
        dist.all_reduce(t)
        expected = sum(_sparse_of(r, dtype).to_dense() for r in range(world))
        assert t.is_sparse and t.is_coalesced()
        assert torch.allclose(t.to_dense(), expected), (dtype, t.to_dense() - expected)
    # A rank with nothing to add, asynchronously.
    t = _sparse_of(rank) if rank != 1 else torch.sparse_coo_tensor(torch.empty(1, 0, dtype=torch.long), torch.empty(0, 3), (12, 3))
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    expected = sum(_sparse_of(r).to_dense() for r in range(world) if r != 1)
    assert torch.allclose(work.result()[0].to_dense(), expected)
    # Only SUM: every rank raises, and the group goes on.
    try:
        dist.all_reduce(_sparse_of(rank), op=dist.ReduceOp.MAX)
        raise AssertionError("a sparse MAX allreduce ran")
    except RuntimeError as e:
        assert "summed only" in str(e), str(e)
    # Sparse on one rank, dense on another: a disagreement every rank raises.
    try:
        dist.all_reduce(_sparse_of(rank) if rank == 0 else _sparse_of(rank).to_dense())
        raise AssertionError("sparse and dense ranks were reduced together")
    except RuntimeError as e:
        assert "allreduce_sparse" in str(e), str(e)
    return "ok"


def test_sparse_allreduce_sums_coo_tensors_as_gloo_does():
    assert run_job(3, case_sparse_allreduce, timeout_s=20) == ["ok"] * 3


def case_ddp_with_sparse_embeddings():
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()

    def make():
        torch.manual_seed(0)
        return torch.nn.EmbeddingBag(50, 8, mode="sum", sparse=True)

    def batch(r, step):
        g = torch.Generator().manual_seed(1000 * step + r)
        return torch.randint(0, 50, (12,), generator=g), torch.tensor([0, 4, 8])

    model = DDP(make())
    reference = make()  # one process, every rank's batch, DDP's averaging
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(4):
        opt.zero_grad()
        model(*batch(rank, step)).pow(2).sum().backward()
        assert model.module.weight.grad.is_sparse
        opt.step()
        ref_opt.zero_grad()
        (sum(reference(*batch(r, step)).pow(2).sum() for r in range(world)) / world).backward()
        ref_opt.step()
        assert torch.allclose(model.module.weight, reference.weight, atol=1e-5), step
    return "ok"


def test_ddp_with_sparse_gradients_matches_one_process():
    assert run_job(3, case_ddp_with_sparse_embeddings, timeout_s=30) == ["ok"] * 3


def case_profiler():
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    rank, world = dist.get_rank(), dist.get_world_size()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dist.all_reduce(torch.ones(1000))
        dist.all_gather_into_tensor(torch.empty(1000 * world), torch.ones(1000, dtype=torch.float32))
        if rank == 0:
            dist.send(torch.ones(7, dtype=torch.int64), 1)
        elif rank == 1:
            dist.recv(torch.empty(7, dtype=torch.int64), 0)
        import torch.distributed._functional_collectives as funcol

        funcol.all_reduce(torch.ones(10), "sum", dist.group.WORLD).wait()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return [(e["name"], e.get("args", {})) for e in events if e.get("name") == "record_param_comms" or "hier:" in e.get("name", "")]


def test_the_profiler_shows_every_collective_and_point_to_point():
    """Each operation appears as Gloo's and NCCL's do: a record_param_comms event with its name, sizes, dtype
    and group, and the work's own "hier:<op>" event; for the c10d calls and the functional ones."""
    for rank, events in enumerate(run_job(2, case_profiler, timeout_s=20)):
        comms = [args for name, args in events if name == "record_param_comms"]
        seen = [(a["Collective name"], a["In msg nelems"], a["Out msg nelems"], a["dtype"]) for a in comms]
        p2p = ("send", 7, 7, "Long") if rank == 0 else ("recv", 7, 7, "Long")
        expected = [("allreduce", 1000, 1000, "Float"), ("all_gather_into_tensor", 1000, 2000, "Float"), p2p,
                    ("allreduce", 10, 10, "Float")]
        assert seen == expected, (rank, seen)
        for args in comms:
            assert args["Group size"] == 2 and args["Rank"] == rank and args["Process Group Ranks"] == "[0, 1]", args
        names = {name for name, _ in events}
        assert {"hier:allreduce", "hier:all_gather_into_tensor", "hier:send" if rank == 0 else "hier:recv"} <= names, names


def case_device_id(path):
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    dist.init_process_group("hier", init_method=f"file://{path}", rank=rank, world_size=world,
                            device_id=torch.device("cpu", 0))
    assert dist.group.WORLD.bound_device_id == torch.device("cpu", 0)
    # Groups made after an eager init split the default group's backend (the others do nothing).
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        t = torch.full((6,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        assert torch.all(t == 3), t
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.all(t == world)
    return "ok"


def test_init_process_group_with_a_device_id_and_the_groups_split_from_it(tmp_path):
    assert run_job(3, case_device_id, str(tmp_path / "store"), timeout_s=20) == ["ok"] * 3


def case_barrier_with_device_ids():
    # Hugging Face Accelerate's wait_for_everyone(): dist.barrier(device_ids=[local_rank]) on every
    # machine. Without a CUDA device the ids name nothing, as with Gloo; the barrier still orders the ranks.
    rank, world = dist.get_rank(), dist.get_world_size()
    assert not torch.cuda.is_available(), "this test is for a process that sees no CUDA device"
    stamps = []
    for device_ids in ([rank], [0]):
        if rank == world - 1:
            time.sleep(0.3)
        start = time.monotonic()
        dist.barrier(device_ids=device_ids)
        stamps.append(time.monotonic() - start)
        work = dist.barrier(device_ids=device_ids, async_op=True)
        work.wait()
    # Every rank but the late one waited for it at each barrier.
    if rank != world - 1:
        assert min(stamps) > 0.2, stamps
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == world)
    return "ok"


def test_barrier_with_device_ids_works_as_gloos_without_a_gpu(pools):
    assert pools(3).run(case_barrier_with_device_ids) == ["ok"] * 3
