"""Lightning Fabric with DDPStrategy(process_group_backend=...), launched by torchrun: a training loop with
Fabric's own collectives (all_reduce, all_gather, broadcast, barrier) beside the model's gradients."""

import lightning as L
import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.fabric.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _common import arguments, carried_by, save


def main():
    args = arguments()
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(process_group_backend=args.backend))
    fabric.launch()
    fabric.seed_everything(99)
    model = nn.Sequential(nn.Linear(8, 24), nn.ReLU(), nn.Linear(24, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)
    data = torch.Generator().manual_seed(3)
    x = torch.randn(256, 8, generator=data)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(256, 1, generator=data)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=32))
    losses = []
    for _ in range(3):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(xb), yb)
            fabric.backward(loss)
            optimizer.step()
            losses.append(fabric.all_reduce(loss.detach(), reduce_op="mean"))
    fabric.barrier()
    gathered = fabric.all_gather(torch.arange(3.0) + fabric.global_rank)
    chosen = fabric.broadcast({"from": fabric.global_rank, "value": [fabric.global_rank * 1.5]}, src=1)
    save(
        args.out,
        fabric.global_rank,
        params={k: v.detach().clone() for k, v in model.state_dict().items()},
        losses=torch.stack(losses),
        gathered=gathered,
        broadcast=chosen,
        **carried_by(),
    )


if __name__ == "__main__":
    main()
