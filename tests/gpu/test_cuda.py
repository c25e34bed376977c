"""The CUDA path. On a machine without a GPU every test here skips, saying why; on a CUDA machine run
tests/gpu/run.sh. One node with as many ranks as GPUs uses NCCL; ranks on simulated hosts (HIER_HOST_ID)
take the staged path through pinned host memory and UCX (one rank per host, so several may share a GPU),
or, with several GPUs per simulated host, NCCL inside each host and UCX between them (split-rail allreduce,
rails all_gather_into_tensor and reduce_scatter_tensor)."""

import os
import sys

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from harness import run_job  # noqa: E402
from reference import check_equal, contribution, expected_reduction  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU (none here); run tests/gpu/run.sh on a CUDA machine")
needs_two = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPUs for one NCCL rank each ({GPUS} here)")
needs_four = pytest.mark.skipif(GPUS < 4, reason=f"needs 4 CUDA GPUs: 2 simulated hosts x 2 NCCL ranks ({GPUS} here)")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.float64]


def case_cuda_collectives(seed):
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())
    for dtype in DTYPES:
        for op in ["SUM", "MAX", "AVG"] if dtype.is_floating_point else ["SUM", "MAX"]:
            for async_op in (False, True):
                t = contribution(rank, 10001, dtype, seed, op).to(device)
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=async_op)
                if async_op:
                    work.wait()  # the current stream now waits for the collective
                expected = expected_reduction([contribution(r, 10001, dtype, seed, op) for r in range(world)], op, dtype)
                check_equal(t.cpu(), expected, f"cuda all_reduce {op} {dtype} async={async_op}")
        out = torch.empty(world * 513, dtype=dtype, device=device)
        dist.all_gather_into_tensor(out, contribution(rank, 513, dtype, seed).to(device))
        check_equal(out.cpu(), torch.cat([contribution(r, 513, dtype, seed) for r in range(world)]), f"cuda allgather {dtype}")
        b = contribution(rank, 777, dtype, seed).to(device)
        dist.broadcast(b, src=world - 1)
        check_equal(b.cpu(), contribution(world - 1, 777, dtype, seed), f"cuda broadcast {dtype}")
    # reduce_scatter with AVG and PREMUL_SUM, the FSDP pair.
    inp = torch.cat([contribution(rank, 64, torch.float32, seed + p) for p in range(world)]).cuda()
    out = torch.empty(64, device=device)
    for op, reduce_op in (("AVG", dist.ReduceOp.AVG), ("PREMUL_SUM", dist._make_nccl_premul_sum(0.5))):
        dist.reduce_scatter_tensor(out, inp, op=reduce_op)
        expected = expected_reduction([contribution(r, 64, torch.float32, seed + rank) for r in range(world)], op, torch.float32)
        check_equal(out.cpu(), expected, f"cuda reduce_scatter {op}")
    # all_to_all_single with uneven splits.
    splits = [(rank + p) % 3 + 1 for p in range(world)]
    recv_splits = [(p + rank) % 3 + 1 for p in range(world)]
    inp = torch.cat([torch.full((s,), float(rank * 100 + p)) for p, s in enumerate(splits)]).cuda()
    out = torch.empty(sum(recv_splits), device=device)
    dist.all_to_all_single(out, inp, recv_splits, splits)
    check_equal(out.cpu(), torch.cat([torch.full((s,), float(p * 100 + rank)) for p, s in enumerate(recv_splits)]), "cuda all_to_all")
    # The future completes with the outputs, on the stream.
    t = torch.ones(8, device=device)
    fut = dist.all_reduce(t, async_op=True).get_future()
    check_equal(fut.wait()[0].cpu(), torch.full((8,), float(world)), "cuda future")
    dist.barrier()


@needs_gpu
def test_one_rank_nccl():
    run_job(1, case_cuda_collectives, 1)


@needs_two
def test_nccl_on_one_node():
    run_job(min(GPUS, 4), case_cuda_collectives, 2)


@needs_gpu
def test_staged_path_on_simulated_hosts():
    # Two "hosts" of one rank each: NCCL is not used between them, so they may even share one GPU.
    run_job(2, case_cuda_collectives, 3, env=lambda rank: {"HIER_HOST_ID": f"host-{rank}"})


def case_cuda_across_hosts(seed):
    """2 simulated hosts x 2 GPUs: large allreduces (split rail), all_gather_into_tensor and
    reduce_scatter_tensor (rails) with NCCL inside each host and UCX between them, in many fragments
    (HIER_HIERARCHY_FRAGMENT_BYTES is small) whose parts do not divide evenly."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())
    numel = 300001
    for dtype in DTYPES:
        ops = ["SUM", "MAX", "MIN", "AVG", "PRODUCT"] if dtype.is_floating_point else ["SUM", "MAX", "MIN"]
        for op in ops:
            for async_op in (False, True):
                t = contribution(rank, numel, dtype, seed, op).to(device)
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=async_op)
                if async_op:
                    work.wait()
                expected = expected_reduction([contribution(r, numel, dtype, seed, op) for r in range(world)], op, dtype)
                check_equal(t.cpu(), expected, f"cuda split-rail all_reduce {op} {dtype} async={async_op}")
    t = contribution(rank, numel, torch.float32, seed).to(device)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.25))
    expected = expected_reduction([contribution(r, numel, torch.float32, seed) for r in range(world)], "SUM", torch.float32)
    torch.testing.assert_close(t.cpu(), expected * 0.25)
    # The FSDP pair through the rails schedules: NCCL inside each host, UCX between them.
    for dtype in DTYPES:
        out = torch.empty(world * numel, dtype=dtype, device=device)
        dist.all_gather_into_tensor(out, contribution(rank, numel, dtype, seed).to(device))
        expected = torch.cat([contribution(r, numel, dtype, seed) for r in range(world)])
        check_equal(out.cpu(), expected, f"cuda all_gather_into_tensor across hosts {dtype}")
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for op in ["SUM", "AVG", "MAX"] if dtype.is_floating_point else ["SUM", "MIN"]:
            inp = torch.cat([contribution(rank, numel, dtype, seed + p, op) for p in range(world)]).to(device)
            out = torch.empty(numel, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(out, inp, op=getattr(dist.ReduceOp, op))
            expected = expected_reduction([contribution(r, numel, dtype, seed + rank, op) for r in range(world)], op, dtype)
            check_equal(out.cpu(), expected, f"cuda reduce_scatter_tensor across hosts {op} {dtype}")
    # An op NCCL lacks takes the staged host path and still gives the right answer.
    t = contribution(rank, numel, torch.int32, seed, "BAND").to(device)
    dist.all_reduce(t, op=dist.ReduceOp.BAND)
    expected = expected_reduction([contribution(r, numel, torch.int32, seed, "BAND") for r in range(world)], "BAND", torch.int32)
    check_equal(t.cpu(), expected, "cuda all_reduce BAND across hosts")


@needs_four
def test_nccl_inside_hosts_ucx_between():
    env = {"HIER_HIERARCHY_FRAGMENT_BYTES": "64K"}
    run_job(4, case_cuda_across_hosts, 4, env=lambda rank: {**env, "HIER_HOST_ID": f"host-{rank // 2}"})


def case_cuda_ddp():
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    from test_ddp import train

    model_losses = train(8)[0]
    assert model_losses[-1] < model_losses[0]


@needs_two
def test_ddp_on_cuda():
    run_job(2, case_cuda_ddp)
