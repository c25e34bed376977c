"""torch.distributed.checkpoint, launched by torchrun on 4 ranks: a state dict of DTensors sharded over 4
ranks (and plain tensors and Python values) saved, then loaded under other shardings (a 2x2 mesh; a 2-rank
sub-group) and whole. Every loaded value is checked against the tensor each rank rebuilds from the seed."""

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from _common import arguments, carried_by, save


def full(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def main():
    args = arguments()
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 4, "dcp_reshard runs on 4 ranks"
    weight, bias = full(1, 13, 6), full(2, 10)  # 13 rows over 4 ranks: uneven shards
    line = init_device_mesh("cpu", (4,))
    state = {
        "weight": distribute_tensor(weight, line, [Shard(0)]),
        "bias": distribute_tensor(bias, line, [Shard(0)]),
        "step": torch.tensor(17),
        "extra": {"lr": 0.25, "names": ["a", "b"]},
    }
    path = f"{args.out}/checkpoint"
    dcp.save(state, checkpoint_id=path)

    checks = {}
    square = init_device_mesh("cpu", (2, 2))
    target = {
        "weight": distribute_tensor(torch.zeros(13, 6), square, [Shard(1), Shard(0)]),
        "bias": distribute_tensor(torch.zeros(10), square, [Replicate(), Shard(0)]),
        "step": torch.tensor(0),
        "extra": {"lr": 0.0, "names": []},
    }
    dcp.load(target, checkpoint_id=path)
    checks["2x2 weight"] = torch.equal(target["weight"].full_tensor(), weight)
    checks["2x2 bias"] = torch.equal(target["bias"].full_tensor(), bias)
    checks["2x2 values"] = int(target["step"]) == 17 and target["extra"] == {"lr": 0.25, "names": ["a", "b"]}

    whole = {"weight": torch.zeros(13, 6), "bias": torch.zeros(10)}
    dcp.load(whole, checkpoint_id=path)
    checks["whole"] = torch.equal(whole["weight"], weight) and torch.equal(whole["bias"], bias)

    pair = dist.new_group([0, 1])
    if rank < 2:
        mesh = DeviceMesh.from_group(pair, "cpu")
        halves = {"weight": distribute_tensor(torch.zeros(13, 6), mesh, [Shard(0)])}
        dcp.load(halves, checkpoint_id=path, process_group=pair)
        checks["sub-group"] = torch.equal(halves["weight"].full_tensor(), weight)
    dist.barrier()
    groups = (dist.group.WORLD, pair) if rank < 2 else (dist.group.WORLD,)
    save(args.out, rank, checks=checks, local_shard=target["weight"].to_local().clone(), **carried_by(*groups))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
