"""DTensor on a 2x2 mesh, launched by torchrun on 4 ranks: tensor parallelism (ColwiseParallel,
RowwiseParallel) on one dimension and FSDP2 (fully_shard) on the other, trained for a few steps."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from _common import arguments, carried_by, save


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 32)
        self.down = nn.Linear(32, 8)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def main():
    args = arguments()
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(Mlp(), Mlp())
    for block in model:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(100 + mesh["dp"].get_local_rank())  # each dp rank its own batch
    losses = []
    for _ in range(4):
        x = torch.randn(6, 8, generator=data)
        loss = (model(x) - x.flip(1)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    params = {name: p.full_tensor().clone() for name, p in model.named_parameters()}
    groups = mesh["dp"].get_group(), mesh["tp"].get_group()
    save(args.out, rank, params=params, losses=torch.stack(losses), **carried_by(*groups))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
