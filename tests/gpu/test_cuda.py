"""The CUDA path. On a machine without a GPU every test here skips, saying why; on a CUDA machine run
tests/gpu/run.sh (it works offline, on one GPU).

One GPU is enough for most of it:
  * world 1 on cuda:0: every collective of the CPU suite (every op, dtype, reduce op, size) on CUDA tensors,
    stream semantics, futures, functional collectives and DTensor;
  * 2 simulated hosts x 1 rank, both on cuda:0: the staged path (pinned host memory and UCX), point-to-point,
    barrier, and a peer that dies;
  * 2 simulated hosts x 2 ranks, all on cuda:0: NCCL inside each host and UCX between them. NCCL refuses two
    ranks of one communicator on one GPU ("Duplicate GPU") unless each rank has its own NCCL_HOSTID; with
    one, NCCL takes them for separate hosts and connects them over its socket transport.
Tests that need one GPU per rank skip on one GPU, saying so.
"""

import datetime
import os
import sys
import time

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from harness import RankFailure, RankPool, run_job  # noqa: E402
from reference import check_equal, contribution, expected_reduction  # noqa: E402
import test_agreement  # noqa: E402
import test_collectives  # noqa: E402
# Run here too, on the build for this machine's torch: hier must share the process's libstdc++.
from test_registration import test_the_plugin_shares_the_processs_libstdcxx  # noqa: E402,F401
# hier as the CPU half of an NCCL job: torch makes NCCL's half only where a CUDA device is.
from test_mixed_backends import test_cpu_hier_cuda_nccl_makes_hier_the_cpu_half_of_an_nccl_job  # noqa: E402,F401

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU (none here); run tests/gpu/run.sh on a CUDA machine")
needs_two = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPUs for one NCCL rank each ({GPUS} here)")
needs_four = pytest.mark.skipif(GPUS < 4, reason=f"needs 4 CUDA GPUs: 2 simulated hosts x 2 NCCL ranks ({GPUS} here)")

# NCCL between ranks that share a GPU: each its own "host" to NCCL, talking over loopback sockets.
NCCL_ON_ONE_GPU = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}


def on_cuda(case, *args):
    """Runs a case of the CPU suite with CUDA tensors: every tensor it makes lands on this rank's GPU."""
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    torch.set_default_device(f"cuda:{torch.cuda.current_device()}")
    try:
        return case(*args)
    finally:
        torch.set_default_device("cpu")


def simulated_hosts(layout, nccl_host_per_rank=False, **extra):
    """The environment of each rank for a layout of simulated hosts ("AB": two hosts of one rank)."""

    def env(rank):
        e = {"HIER_HOST_ID": f"host-{layout[rank]}", "HIER_HIERARCHY_FRAGMENT_BYTES": "64K", **extra}
        if nccl_host_per_rank:
            e.update(NCCL_ON_ONE_GPU, NCCL_HOSTID=f"nccl-host-{rank}")
        return e

    return env


CASES = test_collectives.CASES


@pytest.fixture(scope="module")
def cuda_pools():
    live = {}

    def get(world, layout=None, nccl_host_per_rank=False):
        key = (world, layout, nccl_host_per_rank)
        pool = live.get(key)
        if pool is None or pool.broken:
            env = simulated_hosts(layout, nccl_host_per_rank) if layout else None
            pool = live[key] = RankPool(world, env=env, timeout_s=120)
        return pool

    yield get
    for pool in live.values():
        pool.close()


# ---- every collective on CUDA tensors ------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_one_rank_on_one_gpu(cuda_pools, case):
    cuda_pools(1).run(on_cuda, case, 42)


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_two_hosts_of_one_rank_share_one_gpu(cuda_pools, case):
    # One rank per host: no NCCL at all; everything staged through pinned host memory and UCX.
    cuda_pools(2, "AB").run(on_cuda, case, 43)


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_two_hosts_of_two_ranks_on_one_gpu(cuda_pools, case):
    # NCCL inside each simulated host (two ranks on one GPU, told apart by NCCL_HOSTID), UCX between.
    cuda_pools(4, "AABB", nccl_host_per_rank=True).run(on_cuda, case, 44)


@needs_two
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_one_host_one_gpu_per_rank(cuda_pools, case):
    cuda_pools(min(GPUS, 4)).run(on_cuda, case, 45)


@needs_four
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_two_hosts_one_gpu_per_rank(cuda_pools, case):
    cuda_pools(4, "AABB").run(on_cuda, case, 46)


# ---- stream semantics, futures, lifetimes ---------------------------------------------------------------


def _sleep_cycles(ms):
    """GPU cycles for about `ms` milliseconds (torch.cuda._sleep spins the device that long)."""
    return int(ms * 1e-3 * torch.cuda.get_device_properties(torch.cuda.current_device()).clock_rate * 1e3)


def case_stream_semantics(host_part):
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    results = {}
    for async_op in (True, False):
        # The producer runs on a side stream, which is current when the collective is issued: the
        # collective must wait for it (comm stream waits for the current one, or runs on it).
        side = torch.cuda.Stream()
        t = torch.zeros(1 << 20, device=dev)
        with torch.cuda.stream(side):
            torch.cuda._sleep(_sleep_cycles(100))
            t.fill_(rank + 1.0)
            work = dist.all_reduce(t, async_op=async_op)
            if async_op:
                work.wait()  # the current (side) stream waits for the collective
            got = t.sum().item() / t.numel()
        expected = world * (world + 1) / 2
        assert got == expected, f"async_op={async_op}: the collective did not wait for its producer: {got} != {expected}"
    # The call is enqueued and returns, and wait() orders the stream: neither waits on the host for the
    # device, on one host (NCCL) or across hosts (the network step runs on hier's executor, the device
    # steps after it behind a gate), with async_op or without.
    t = torch.ones(1 << 20, device=dev)
    torch.cuda._sleep(_sleep_cycles(300))
    start = time.monotonic()
    dist.all_reduce(t)
    results["blocking_call_s"] = time.monotonic() - start
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    results["call_s"] = time.monotonic() - start
    start = time.monotonic()
    work.wait()
    results["wait_s"] = time.monotonic() - start
    busy = not work.is_completed()
    torch.cuda.synchronize()
    for what in ("blocking_call_s", "call_s", "wait_s"):
        assert results[what] < 0.2, f"{what}: the host was held {results[what]:.3f} s (host part: {host_part})"
    assert busy, "the work completed before the device passed the sleep ahead of it"
    t.div_(world)  # two all_reduces of ones: world * world
    check_equal(t.cpu(), torch.full((1 << 20,), float(world)), "all_reduce after a busy stream")
    assert work.is_completed()
    # The work keeps its tensors alive until the device passed them: drop every reference, churn the
    # allocator, and the result is still right.
    torch.cuda._sleep(_sleep_cycles(200))
    work = dist.all_reduce(torch.full((1 << 18,), float(rank + 1), device=dev), async_op=True)
    junk = [torch.full((1 << 18,), -7.0, device=dev) for _ in range(8)]
    work.wait()
    result = work.result()[0]
    check_equal(result.cpu(), torch.full((1 << 18,), float(world * (world + 1) / 2)), "tensor kept alive by its work")
    del junk
    # The future completes with the outputs; a then() callback sees them on its stream.
    t = torch.full((8,), 2.0, device=dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    check_equal(doubled.wait().cpu(), torch.full((8,), 4.0 * world), "future then()")
    check_equal(fut.wait()[0].cpu(), torch.full((8,), 2.0 * world), "future value")
    # Barrier orders the device: what was enqueued before it is done when it returns.
    t = torch.zeros(1, device=dev)
    torch.cuda._sleep(_sleep_cycles(100))
    t.fill_(5.0)
    dist.barrier()
    done = torch.cuda.current_stream().query()
    assert done, "dist.barrier() returned before the work enqueued ahead of it finished"
    return results


@needs_gpu
def test_stream_semantics_one_rank():
    run_job(1, case_stream_semantics, False)


@needs_gpu
def test_stream_semantics_across_hosts_on_one_gpu():
    run_job(2, case_stream_semantics, True, env=simulated_hosts("AB"))


@needs_gpu
def test_stream_semantics_across_hosts_with_nccl_inside_them():
    # The hierarchical schedules: NCCL node steps enqueued by the caller, the network step behind gates.
    run_job(4, case_stream_semantics, True, env=simulated_hosts("AABB", nccl_host_per_rank=True))


def case_two_groups_alternately(iterations):
    """Two groups over the same ranks, used in turn from the current stream and from a side stream, as
    FSDP2 + TP or HSDP do: every group's NCCL calls in program order on each rank, on streams of its own,
    nothing deadlocks, every value right."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    other = dist.new_group(list(range(world)))
    side = torch.cuda.Stream()
    a = torch.empty(4096, device="cuda")
    b = torch.empty(1 << 16, device="cuda")
    for i in range(iterations):
        a.fill_(rank + i)
        b.fill_(2.0 * rank - i)
        dist.all_reduce(a)
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.current_stream())
            work = dist.all_reduce(b, group=other, async_op=True)
            work.wait()
        torch.cuda.current_stream().wait_stream(side)
        if i % 100 == 99:
            check_equal(a[:4].cpu(), torch.full((4,), float(world * (world - 1) / 2 + world * i)), f"group 1, step {i}")
            check_equal(b[:4].cpu(), torch.full((4,), float(world * (world - 1) - world * i)), f"group 2, step {i}")
    torch.cuda.synchronize()
    return "ok"


@needs_gpu
@pytest.mark.parametrize("layout", ["AA", "AABB", "AAB"], ids=["one-host", "2x2", "2+1"])
def test_two_groups_used_alternately_do_not_deadlock(layout):
    env = simulated_hosts(layout, nccl_host_per_rank=True)
    assert run_job(len(layout), case_two_groups_alternately, 1000, env=env, timeout_s=120) == ["ok"] * len(layout)


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_two_plus_one_hosts_on_one_gpu(cuda_pools, case):
    # Uneven hosts: the leaders' schedules, NCCL on the host of two, none on the host of one.
    cuda_pools(3, "AAB", nccl_host_per_rank=True).run(on_cuda, case, 47)


@needs_gpu
@pytest.mark.parametrize("layout", ["A", "AA", "AB", "AABB", "AAB"])
def test_float16_and_bfloat16_near_their_limits(layout):
    import test_narrow_floats

    env = simulated_hosts(layout, nccl_host_per_rank=True)
    run_job(len(layout), on_cuda, test_narrow_floats.case_average_near_the_top, env=env, timeout_s=120)


def case_layout_of_one_rank_only():
    """One rank passes a non-contiguous tensor, the others contiguous ones: the same road on every rank
    (NCCL through a contiguous copy), the right values in the caller's own tensor."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    base = torch.full((64, 32), float(rank + 1), device="cuda")
    t = base.t() if rank == 0 else base.clone()
    dist.all_reduce(t)
    check_equal(t.cpu(), torch.full(t.shape, float(world * (world + 1) / 2)), "all_reduce of a transposed view")
    out = torch.empty(world, 64, 33, device="cuda")[:, :, :32] if rank == 1 else torch.empty(world, 64, 32, device="cuda")
    dist.all_gather_into_tensor(out, torch.full((64, 32), float(rank), device="cuda"))
    for r in range(world):
        check_equal(out[r].cpu(), torch.full((64, 32), float(r)), f"all_gather_into_tensor part {r}")
    return "ok"


def case_groups_split_from_a_bound_parent(port):
    """init_process_group(device_id=...) binds the default group to the GPU; once its NCCL communicator
    exists, new_group and split_group take theirs from it by ncclCommSplit (every rank of the parent takes
    part, the others through perform_nocolor_split), and the children compute right."""
    import datetime

    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("hier", store=store, rank=rank, world_size=world, device_id=torch.device("cuda", 0))
    t = torch.ones(16, device="cuda")
    dist.all_reduce(t)  # the parent's communicator
    check_equal(t.cpu(), torch.full((16,), float(world)), "parent")
    child = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        u = torch.full((16,), float(rank), device="cuda")
        dist.all_reduce(u, group=child)
        check_equal(u.cpu(), torch.full((16,), float(world - 1)), "new_group's child")
    halves = dist.split_group(split_ranks=[list(range(world // 2)), list(range(world // 2, world))])
    v = torch.full((16,), float(rank), device="cuda")
    dist.all_reduce(v, group=halves)
    mine = range(world // 2) if rank < world // 2 else range(world // 2, world)
    check_equal(v.cpu(), torch.full((16,), float(sum(mine))), "split_group's child")
    torch.cuda.synchronize()
    return "ok"


@needs_gpu
@pytest.mark.parametrize("layout", ["AAA", "AABB"])
def test_groups_split_their_communicator_from_a_bound_parent(layout):
    from harness import free_port

    env = simulated_hosts(layout, nccl_host_per_rank=True)
    assert run_job(len(layout), case_groups_split_from_a_bound_parent, free_port(), env=env) == ["ok"] * len(layout)


@needs_gpu
@pytest.mark.parametrize("layout", ["AA", "AABB"])
def test_one_ranks_memory_layout_does_not_change_the_road(layout):
    env = simulated_hosts(layout, nccl_host_per_rank=True)
    assert run_job(len(layout), case_layout_of_one_rank_only, env=env) == ["ok"] * len(layout)


def case_functional_and_dtensor(seed):
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    x = contribution(rank, 1000, torch.float32, seed).to(dev)
    y = funcol.all_reduce(x, "sum", dist.group.WORLD)
    expected = expected_reduction([contribution(r, 1000, torch.float32, seed) for r in range(world)], "SUM", torch.float32)
    check_equal(torch.ops._c10d_functional.wait_tensor(y).cpu(), expected, "funcol all_reduce on CUDA")
    g = funcol.all_gather_tensor(x, 0, dist.group.WORLD)
    check_equal(g.cpu(), torch.cat([contribution(r, 1000, torch.float32, seed) for r in range(world)]), "funcol all_gather")
    mesh = init_device_mesh("cuda", (world,))
    full = contribution(0, 4 * world * 3, torch.float32, seed).reshape(4 * world, 3).to(dev)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    check_equal(sharded.to_local().cpu(), full.chunk(world)[rank].cpu(), "DTensor Shard(0)")
    check_equal(sharded.redistribute(mesh, [Replicate()]).to_local().cpu(), full.cpu(), "DTensor Shard -> Replicate")


@needs_gpu
def test_functional_and_dtensor_one_rank():
    run_job(1, case_functional_and_dtensor, 7)


@needs_gpu
def test_functional_and_dtensor_across_hosts_on_one_gpu():
    run_job(2, case_functional_and_dtensor, 8, env=simulated_hosts("AB"))


def case_graph_capture():
    """An allreduce captured in a CUDA graph runs at every replay (one host: NCCL on the capturing stream)."""
    torch.cuda.set_device(0)
    world = dist.get_world_size()
    t = torch.ones(1024, device="cuda")
    dist.all_reduce(t)  # the communicator exists before the capture
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        t.fill_(1.0)
        with torch.cuda.graph(graph, stream=side):
            t.mul_(2.0)
            dist.all_reduce(t)
    torch.cuda.current_stream().wait_stream(side)
    for replay in range(3):
        t.fill_(1.0)
        graph.replay()
        torch.cuda.synchronize()
        check_equal(t.cpu(), torch.full((1024,), 2.0 * world), f"replay {replay}")


@needs_gpu
def test_graph_capture_one_rank():
    run_job(1, case_graph_capture)


def case_premul_sum_with_a_device_factor_captured():
    """PREMUL_SUM whose factor is a CUDA tensor (FSDP's gradient divide): NCCL reads it on the device, so
    the call does not wait for it on the host and can be captured; a new factor shows at the next replay."""
    torch.cuda.set_device(0)
    world = dist.get_world_size()
    factor = torch.tensor(0.5, device="cuda")
    t = torch.ones(1000, device="cuda")
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    check_equal(t.cpu(), torch.full((1000,), 0.5 * world), "premul_sum, eager")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph, stream=side):
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    torch.cuda.current_stream().wait_stream(side)
    for value in (0.25, 2.0):
        t.fill_(1.0)
        factor.fill_(value)
        graph.replay()
        torch.cuda.synchronize()
        check_equal(t.cpu(), torch.full((1000,), value * world), f"premul_sum replayed with {value}")
    return "ok"


@needs_gpu
def test_premul_sum_with_a_device_factor_is_captured():
    assert run_job(1, case_premul_sum_with_a_device_factor_captured) == ["ok"]


def case_shrink_after_a_death_with_cuda_work(victim):
    """A rank dies with CUDA work in flight: the survivors' operation fails (seen through wait() with a
    timeout), they shrink the group without it, and the smaller group's CUDA collectives are right."""
    import signal

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    t = torch.ones(1 << 16, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait(timeout=datetime.timedelta(seconds=60))
        raise AssertionError("an allreduce without the killed rank succeeded")
    except dist.DistBackendError:
        pass
    small = dist.shrink_group([victim])
    survivors = [r for r in range(world) if r != victim]
    assert small.size() == world - 1 and small.rank() == survivors.index(rank)
    u = torch.full((1000,), float(rank + 1), device="cuda")
    dist.all_reduce(u, group=small)
    check_equal(u.cpu(), torch.full((1000,), float(sum(r + 1 for r in survivors))), "after the shrink")
    return "shrunk"


@needs_gpu
@pytest.mark.parametrize("layout", ["AAA", "AABB"])
def test_shrink_after_a_death_with_cuda_work_in_flight(layout):
    env = simulated_hosts(layout, nccl_host_per_rank=True)
    victim = 1
    results = run_job(len(layout), case_shrink_after_a_death_with_cuda_work, victim, env=env, timeout_s=5,
                      may_exit={victim})
    assert all(r == "shrunk" for i, r in enumerate(results) if i != victim), results


def case_abort_with_work_pending():
    """abort() with CUDA work still on the device and a peer that never comes returns in bounded time."""
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    if rank == 0:
        torch.cuda._sleep(_sleep_cycles(500))
        dist.all_reduce(t, async_op=True)  # rank 1 never joins it
    start = time.monotonic()
    dist.distributed_c10d._abort_process_group()
    took = time.monotonic() - start
    assert took < 20, f"abort took {took:.1f} s"
    return "aborted"


@needs_gpu
@pytest.mark.parametrize("layout", ["AA", "AB"], ids=["nccl", "staged"])
def test_abort_returns_with_cuda_work_pending(layout):
    env = simulated_hosts(layout, nccl_host_per_rank=layout == "AA")
    assert run_job(2, case_abort_with_work_pending, env=env, timeout_s=30) == ["aborted"] * 2


def case_profiler_timing_and_batches():
    """What GPU users look at: record_param_comms events for CUDA operations, get_duration() once timing is
    on, and batch_isend_irecv as one work (coalescing), with the values checked."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.set_device(0)
    rank, world = dist.get_rank(), dist.get_world_size()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dist.all_reduce(torch.ones(1000, device="cuda"))
        if world > 1:
            if rank == 0:
                dist.send(torch.ones(7, dtype=torch.int64, device="cuda"), 1)
            elif rank == 1:
                dist.recv(torch.empty(7, dtype=torch.int64, device="cuda"), 0)
    torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    seen = [(e["args"]["Collective name"], e["args"]["In msg nelems"], e["args"]["dtype"])
            for e in events if e.get("name") == "record_param_comms"]
    expected = [("allreduce", 1000, "Float")]
    if world > 1 and rank < 2:
        expected.append(("send" if rank == 0 else "recv", 7, "Long"))
    assert seen == expected, seen

    dist.group.WORLD._enable_collectives_timing()
    big = torch.ones(1 << 22, device="cuda")
    work = dist.all_reduce(big, async_op=True)
    work.wait()
    torch.cuda.synchronize()
    duration = work._get_duration()
    assert 0 < duration < 60_000, duration
    check_equal(big[:10].cpu(), torch.full((10,), float(world)), "timed allreduce")

    if world > 1:
        right, left = (rank + 1) % world, (rank - 1) % world
        out = torch.arange(1000, dtype=torch.float32, device="cuda") + rank
        got = torch.empty(1000, device="cuda")
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, right), dist.P2POp(dist.irecv, got, left)])
        assert len(works) == 1, len(works)
        works[0].wait()
        torch.cuda.synchronize()
        check_equal(got.cpu(), torch.arange(1000, dtype=torch.float32) + left, "batch_isend_irecv")
        # Both ways with one peer, large: as one NCCL group on one host, neither send waits for the other.
        peer = rank ^ 1
        if peer < world:
            mine = torch.full((1 << 24,), float(rank), device="cuda")
            theirs = torch.empty(1 << 24, device="cuda")
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)])
            works[0].wait()
            torch.cuda.synchronize()
            check_equal(theirs[:8].cpu(), torch.full((8,), float(peer)), "batch_isend_irecv both ways")
    return "ok"


@needs_gpu
def test_profiler_timing_and_batches_one_rank():
    assert run_job(1, case_profiler_timing_and_batches) == ["ok"]


@needs_gpu
def test_profiler_timing_and_batches_across_hosts_on_one_gpu():
    assert run_job(2, case_profiler_timing_and_batches, env=simulated_hosts("AB")) == ["ok"] * 2


@needs_gpu
def test_profiler_timing_and_batches_on_one_host():
    # batch_isend_irecv as one NCCL group on the group's communicator; single sends through UCX.
    env = simulated_hosts("AA", nccl_host_per_rank=True)
    assert run_job(2, case_profiler_timing_and_batches, env=env) == ["ok"] * 2


# ---- point-to-point across hosts -------------------------------------------------------------------------


def case_isend_then_collective_against_collective_then_irecv(seed):
    """Rank 0 sends, then joins a collective; rank 1 joins the collective, then receives. Neither may wait
    for the other: the send must not hold up the group's collectives."""
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    payload = contribution(0, 1 << 20, torch.float32, seed).cuda()
    t = torch.full((4,), float(rank + 1), device="cuda")
    if rank == 0:
        send = dist.isend(payload, 1)
        dist.all_reduce(t)
        send.wait()
    else:
        dist.all_reduce(t)
        got = torch.empty(1 << 20, device="cuda")
        dist.irecv(got, 0).wait()
        check_equal(got.cpu(), payload.cpu(), "the message")
    check_equal(t.cpu(), torch.full((4,), 3.0), "the collective between them")
    # A send posts the data the caller's stream produced, not what the buffer held before.
    if rank == 0:
        buf = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(_sleep_cycles(100))
        buf.fill_(9.0)
        dist.send(buf, 1)
    else:
        got = torch.full((1 << 20,), -1.0, device="cuda")
        dist.recv(got, 0)
        check_equal(got.cpu(), torch.full((1 << 20,), 9.0), "a send after a busy stream")


@needs_gpu
def test_point_to_point_does_not_hold_up_collectives():
    run_job(2, case_isend_then_collective_against_collective_then_irecv, 9, env=simulated_hosts("AB"))


# ---- failures ---------------------------------------------------------------------------------------------


def case_peer_dies(dead):
    """Rank `dead` exits after a first allreduce. The survivors' next one fails within the deadline, its
    future carries the error (never a value), and the group shuts down in bounded time."""
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    if rank == dead:
        os._exit(0)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    # Enqueued and returned, as ProcessGroupNCCL's: its future completed then, with stream semantics. The
    # failure reaches wait() with a timeout (the host waits for the device, then raises), exception(),
    # and the result future.
    result = work.get_future_result()
    try:
        work.wait(timeout=datetime.timedelta(seconds=60))
    except Exception as e:  # noqa: BLE001
        message = str(e)
        took = time.monotonic() - start
        assert "hier:" in message, message
        assert took < 20, f"the failure took {took:.1f} s for a 5 s deadline"
    else:
        raise AssertionError("an all_reduce with a dead peer succeeded")
    assert work.is_completed() and work.exception() is not None
    from torch._C._distributed_c10d import WorkResult

    assert WorkResult(result.wait()) != WorkResult.SUCCESS, "the result of a failed all_reduce says it succeeded"
    start = time.monotonic()
    dist.destroy_process_group()
    took = time.monotonic() - start
    assert took < 30, f"destroy_process_group took {took:.1f} s after a peer died"
    return "failed in time"


@needs_gpu
def test_a_dead_peer_fails_the_survivor_staged():
    # One rank per host: the staged path (UCX between the hosts).
    results = run_job(2, case_peer_dies, 1, env=simulated_hosts("AB"), timeout_s=5, may_exit=(1,))
    assert results[0] == "failed in time"


@needs_gpu
def test_a_dead_peer_fails_the_survivors_inside_nccl():
    # 2 hosts x 2 ranks on one GPU: rank 1 dies, so rank 0 waits in a NCCL node step that never ends; the
    # watchdog aborts it at the deadline, and the others fail with it.
    results = run_job(4, case_peer_dies, 1, env=simulated_hosts("AABB", nccl_host_per_rank=True), timeout_s=5,
                      may_exit=(1,))
    assert all(r == "failed in time" for r in (results[0], results[2], results[3])), results


# ---- under TORCH_DISTRIBUTED_DEBUG=DETAIL: CUDA collectives take hier's agreement too --------------------


@needs_gpu
@pytest.mark.parametrize("layout", ["AA", "AB", "AABB"], ids=["nccl", "staged", "across-hosts"])
def test_disagreement_and_refusal_under_torch_debug_detail(layout):
    # Ranks that pass different reduce ops or roots (what torch's wrapper does not compare), and a refusal
    # on the root alone: every rank raises at once and the next collective is right, on each CUDA way.
    env = simulated_hosts(layout, nccl_host_per_rank=layout != "AB", TORCH_DISTRIBUTED_DEBUG="DETAIL")
    results = run_job(len(layout), on_cuda, test_agreement.case_under_torch_debug_detail, env=env, timeout_s=60)
    assert results == ["ok"] * len(layout)


def case_two_ranks_one_gpu_one_host(seed):
    torch.cuda.set_device(0)
    t = torch.ones(16, device="cuda")
    try:
        dist.all_reduce(t)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return str(e)
    return "accepted"


@needs_gpu
def test_two_ranks_on_one_gpu_are_told_how_to_fix_it():
    # One host, two ranks, one GPU, no NCCL_HOSTID: NCCL refuses; hier says why and what to do.
    results = run_job(2, case_two_ranks_one_gpu_one_host, 11, timeout_s=30)
    for message in results:
        if message == "accepted":
            pytest.skip("this NCCL accepted two ranks on one GPU")
        assert "NCCL_HOSTID" in message and "set_device" in message, message


# ---- several GPUs ------------------------------------------------------------------------------------------


def case_cuda_ddp():
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    torch.set_default_device(f"cuda:{torch.cuda.current_device()}")
    from test_ddp import train

    model_losses = train(8)[0]
    assert model_losses[-1] < model_losses[0]


@needs_gpu
def test_ddp_across_hosts_on_one_gpu():
    run_job(2, case_cuda_ddp, env=simulated_hosts("AB"))


@needs_two
def test_ddp_on_one_host():
    run_job(2, case_cuda_ddp)
