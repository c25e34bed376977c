"""DTensor, tensor parallelism and FSDP2 on a CPU DeviceMesh of hier groups, on 1 to 4 real processes.

These are the users of the functional collectives: each placement change, each parallelized layer and
each sharded training step below issues them through hier. Results are compared with the same model
run whole in one process (every rank rebuilds it from a seed), in float64 so the comparison is tight.
"""

import json

import pytest
import torch
import torch_hier
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def check_close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-10, msg=lambda m: f"{what}: {m}")


def _ops_hier_carried():
    """The operations hier's default group recorded as finished recently (its work table's history)."""
    table = json.loads(torch_hier.work_table(format="json"))
    return {row["op"] for row in table["history"]}


def _full(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def case_placements(seed):
    """distribute_tensor and every redistribute between Shard(0), Shard(1), Replicate and Partial."""
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    full = _full(seed, 2 * world + 1, 3 * world)  # rows do not divide evenly: uneven shards
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    check_close(sharded.full_tensor(), full, "Shard(0) -> full_tensor (all_gather)")
    transposed = sharded.redistribute(mesh, [Shard(1)])
    check_close(transposed.to_local(), full.tensor_split(world, dim=1)[dist.get_rank()], "Shard(0) -> Shard(1)")
    check_close(transposed.redistribute(mesh, [Replicate()]).to_local(), full, "Shard(1) -> Replicate")

    # Partial: each rank holds an addend; Replicate sums them, Shard reduce-scatters them.
    addends = [_full(seed + 1 + r, 4 * world, 5) for r in range(world)]
    partial = DTensor.from_local(addends[dist.get_rank()], mesh, [Partial()])
    total = sum(addends)
    check_close(partial.redistribute(mesh, [Replicate()]).to_local(), total, "Partial -> Replicate (all_reduce)")
    check_close(partial.redistribute(mesh, [Shard(0)]).to_local(), total.chunk(world)[dist.get_rank()],
                "Partial -> Shard(0) (reduce_scatter)")
    # Arithmetic between DTensors that needs a collective: a sharded matmul contracting the sharded dim.
    a, b = _full(seed + 50, 3, 2 * world), _full(seed + 51, 2 * world, 4)
    product = distribute_tensor(a, mesh, [Shard(1)]) @ distribute_tensor(b, mesh, [Shard(0)])
    check_close(product.full_tensor(), a @ b, "Shard(1) @ Shard(0) (Partial, then all_reduce)")


class MLP(nn.Module):
    def __init__(self, seed, width=8, hidden=16):
        super().__init__()
        torch.manual_seed(seed)
        self.up = nn.Linear(width, hidden, dtype=torch.float64)
        self.down = nn.Linear(hidden, width, dtype=torch.float64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def case_tensor_parallel_mlp(seed):
    """Megatron-style MLP: column-parallel then row-parallel Linear, forward and backward."""
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    hidden = 4 * world
    reference, model = MLP(seed, hidden=hidden), MLP(seed, hidden=hidden)
    parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x = _full(seed + 1, 5, 8)  # replicated input, identical on every rank

    out = model(x)
    expected = reference(x)
    check_close(out, expected, "tensor-parallel forward")
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        check_close(grad, q.grad, f"tensor-parallel gradient of {name}")
    assert "allreduce" in _ops_hier_carried(), "the row-parallel all_reduce did not go through hier"


def case_fsdp2_training(seed):
    """fully_shard: three SGD steps, each rank on its own batch, against one process on all batches."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = nn.Sequential(MLP(seed), MLP(seed + 1, hidden=3 * world + 1))  # uneven shards of the second
    reference = nn.Sequential(MLP(seed), MLP(seed + 1, hidden=3 * world + 1))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)

    for step in range(3):
        batches = [_full(seed + 100 * step + r, 4, 8) for r in range(world)]
        loss = model(batches[rank]).pow(2).mean()
        loss.backward()  # reduce_scatter of the gradients, averaged over ranks
        optimizer.step()
        optimizer.zero_grad()
        # The reference: the mean over ranks of each rank's loss, on one process.
        reference_losses = [reference(b).pow(2).mean() for b in batches]
        check_close(loss.detach(), reference_losses[rank].detach(), f"FSDP2 loss at step {step}")
        (sum(reference_losses) / world).backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        check_close(p.full_tensor(), q.detach(), f"FSDP2 parameter {name} after 3 steps")
    carried = _ops_hier_carried()
    assert "reduce_scatter_tensor" in carried and carried & {"all_gather_into_tensor", "allgather_into_tensor_coalesced"}, \
        f"FSDP2's collectives did not go through hier: {carried}"


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_placements_and_redistribute(pools, world_size):
    pools(world_size).run(case_placements, 1)


@pytest.mark.parametrize("world_size", [2, 3])
def test_tensor_parallel_mlp(pools, world_size):
    pools(world_size).run(case_tensor_parallel_mlp, 2)


@pytest.mark.parametrize("world_size", [2, 3])
def test_fsdp2_training_matches_one_process(pools, world_size):
    pools(world_size).run(case_fsdp2_training, 3)
