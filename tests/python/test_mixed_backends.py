"""hier as one half of a per-device backend string (issue 56, item 5).

  * "cpu:gloo,cuda:hier": Gloo carries CPU tensors, hier CUDA tensors;
  * "cuda:hier" alone: CPU collectives have no backend, as torch has it for any CUDA-only backend;
  * "cpu:hier,cuda:nccl": hier as the CPU half of an NCCL job. torch makes NCCL's half only where a CUDA
    device is (torch 2.15: "nccl2 requires at least one CUDA device"), so this one runs on a GPU machine
    (tests/gpu/run.sh runs it) and skips here, saying so.

For each: what get_backend() says, which backend each device's tensors reach, and that new_group,
split_group and the functional collectives inherit the same halves. Results are checked against values
computed locally.
"""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from harness import run_job

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def _backend_on(group, device):
    try:
        return type(group._get_backend(torch.device(device))).__name__
    except RuntimeError as e:
        return f"none: {e}"


def _cpu_collectives_work(group):
    rank, world = dist.get_rank(), dist.get_world_size()
    members = dist.get_process_group_ranks(group)
    t = torch.full((6,), float(rank + 1))
    dist.all_reduce(t, group=group)
    assert torch.all(t == sum(r + 1 for r in members)), t
    out = torch.empty(len(members) * 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)), group=group)
    assert torch.equal(out, torch.tensor(members).float().repeat_interleave(3)), out
    objects = [None] * len(members)
    dist.all_gather_object(objects, {"rank": rank}, group=group)
    assert objects == [{"rank": r} for r in members], objects
    dist.barrier(group=group)
    reduced = funcol.all_reduce(torch.full((4,), float(rank + 1)), "sum", group)
    assert torch.all(torch.ops._c10d_functional.wait_tensor(reduced) == sum(r + 1 for r in members))
    return world


def case_cpu_gloo_cuda_hier():
    rank = dist.get_rank()
    world = dist.group.WORLD
    seen = {"backend": dist.get_backend(), "cpu": _backend_on(world, "cpu"), "cuda": _backend_on(world, "cuda")}
    _cpu_collectives_work(world)
    sub = dist.new_group([0, 1])
    seen["new_group"] = (dist.get_backend(sub), _backend_on(sub, "cpu"), _backend_on(sub, "cuda"))
    _cpu_collectives_work(sub)
    split = dist.split_group(split_ranks=[[0], [1]])
    seen["split_group"] = (dist.get_backend(split), _backend_on(split, "cpu"), _backend_on(split, "cuda"))
    t = torch.full((3,), float(rank + 5))
    dist.all_reduce(t, group=split)  # a group of one: this rank's own value
    assert torch.all(t == rank + 5), t
    return seen


def test_cpu_gloo_cuda_hier_gives_cpu_tensors_to_gloo_and_cuda_tensors_to_hier():
    for seen in run_job(2, case_cpu_gloo_cuda_hier, backend="cpu:gloo,cuda:hier"):
        assert seen["backend"] == "cpu:gloo,cuda:hier", seen
        assert (seen["cpu"], seen["cuda"]) == ("ProcessGroupGloo", "ProcessGroupHier"), seen
        assert seen["new_group"] == ("cpu:gloo,cuda:hier", "ProcessGroupGloo", "ProcessGroupHier"), seen
        assert seen["split_group"] == ("cpu:gloo,cuda:hier", "ProcessGroupGloo", "ProcessGroupHier"), seen


def case_cuda_hier_alone():
    world = dist.group.WORLD
    seen = {"backend": dist.get_backend(), "cpu": _backend_on(world, "cpu"), "cuda": _backend_on(world, "cuda")}
    try:
        dist.all_reduce(torch.ones(3))
        seen["cpu_allreduce"] = "carried"
    except RuntimeError as e:
        seen["cpu_allreduce"] = str(e).split("\n")[0]
    split = dist.split_group(split_ranks=[[0], [1]])
    seen["split_group"] = (dist.get_backend(split), _backend_on(split, "cuda"))
    return seen


def test_cuda_hier_alone_leaves_cpu_tensors_without_a_backend_as_torch_does():
    for seen in run_job(2, case_cuda_hier_alone, backend="cuda:hier"):
        assert seen["backend"] == "cuda:hier", seen
        assert seen["cuda"] == "ProcessGroupHier", seen
        assert seen["cpu"].startswith("none: No backend type associated with device type cpu"), seen
        assert "No backend type associated with device type cpu" in seen["cpu_allreduce"], seen
        assert seen["split_group"] == ("cuda:hier", "ProcessGroupHier"), seen


def case_cpu_hier_cuda_nccl():
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    world = dist.group.WORLD
    seen = {"backend": dist.get_backend(), "cpu": _backend_on(world, "cpu"), "cuda": _backend_on(world, "cuda")}
    _cpu_collectives_work(world)
    sub = dist.new_group([0, 1])
    seen["new_group"] = (_backend_on(sub, "cpu"), _backend_on(sub, "cuda"))
    _cpu_collectives_work(sub)
    t = torch.full((5,), float(rank + 1), device="cuda")
    dist.all_reduce(t)  # NCCL's half
    assert torch.all(t.cpu() == 3.0), t
    return seen


@pytest.mark.skipif(GPUS == 0, reason="torch makes the cuda:nccl half only where a CUDA device is (none here); "
                    "tests/gpu/run.sh runs this on a CUDA machine")
def test_cpu_hier_cuda_nccl_makes_hier_the_cpu_half_of_an_nccl_job():
    env = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}
    if GPUS < 2:
        env_of = lambda rank: dict(env, NCCL_HOSTID=f"nccl-host-{rank}")  # noqa: E731 (two ranks, one GPU)
    else:
        env_of = lambda rank: env  # noqa: E731
    for seen in run_job(2, case_cpu_hier_cuda_nccl, backend="cpu:hier,cuda:nccl", env=env_of):
        assert seen["backend"] == "cpu:hier,cuda:nccl", seen
        assert (seen["cpu"], seen["cuda"]) == ("ProcessGroupHier", "ProcessGroupNCCL"), seen
        assert seen["new_group"] == ("ProcessGroupHier", "ProcessGroupNCCL"), seen
