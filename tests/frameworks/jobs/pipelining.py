"""torch.distributed.pipelining, launched by torchrun on 2 ranks: a 4-layer model cut into 2 stages, trained
with ScheduleGPipe and then Schedule1F1B (4 micro-batches each), stage activations and gradients sent
point-to-point between the ranks."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from _common import arguments, carried_by, save


def main():
    args = arguments()
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = [nn.Linear(10, 10) for _ in range(4)]
    part = nn.Sequential(*layers[2 * rank : 2 * rank + 2])
    optimizer = torch.optim.SGD(part.parameters(), lr=0.1)
    stage = PipelineStage(part, rank, world, torch.device("cpu"))
    data = torch.Generator().manual_seed(42)
    results = {}
    for name, schedule_class in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        schedule = schedule_class(stage, n_microbatches=4, loss_fn=lambda out, target: F.mse_loss(out, target))
        for _ in range(2):
            x, target = torch.randn(8, 10, generator=data), torch.randn(8, 10, generator=data)
            losses = []
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=target, losses=losses)
            optimizer.step()
            optimizer.zero_grad()
            results.setdefault(name, []).extend(float(l.detach()) for l in losses)
    save(
        args.out,
        rank,
        params={k: v.detach().clone() for k, v in part.state_dict().items()},
        losses=results,
        **carried_by(),
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
