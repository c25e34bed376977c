"""DistributedDataParallel trains the same on hier as on Gloo: same losses, same weights."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def case_train(steps):
    return train(steps)


def train(steps, group=None):
    """Trains a small model with DDP over `group` (default: the world); returns (losses, weights)."""
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    # Small buckets: several allreduces per step, overlapping backward.
    ddp = DDP(model, bucket_cap_mb=0.01, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    # Each rank's shard of one learnable problem: y = x A. Drawn on the CPU, used on the default device
    # (the CUDA tests make that a GPU).
    device = torch.get_default_device()
    target = torch.randn(32, 4, generator=torch.Generator().manual_seed(7), device="cpu").to(device)
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1000 + rank), device="cpu").to(device)
    y = x @ target
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        # The mean loss over ranks, so every backend reports one number per step.
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG, group=group)
        losses.append(mean.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def test_ddp_matches_gloo(pools):
    for world in (2, 3):
        hier = pools(world).run(case_train, 12)
        gloo = pools(world, backend="gloo").run(case_train, 12)
        hier_losses, hier_params = hier[0]
        gloo_losses, gloo_params = gloo[0]
        # Sums of floats in another order may differ in the last bits; nothing more.
        torch.testing.assert_close(torch.tensor(hier_losses), torch.tensor(gloo_losses), rtol=1e-5, atol=1e-6)
        for a, b in zip(hier_params, gloo_params):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        # Every hier rank holds identical weights.
        for other in hier[1:]:
            for a, b in zip(hier_params, other[1]):
                assert torch.equal(a, b)
        assert hier_losses[-1] < hier_losses[0], f"the loss did not go down: {hier_losses}"
