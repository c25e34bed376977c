"""One round of test_peer_death.py, as every rank runs it on a simulated host: the ranks run the same
random sequence of mid-size and large collectives (seeded alike), and the victim SIGKILLs itself at a
random point of one of them. Each survivor prints one JSON line: the op it failed in, how long that took,
and the error. The ranks are forked by launcher.py, which checks the host's /dev/shm once all have ended."""

import json
import os
import random
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

OPS = ["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"]
BYTES = [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def start(op, nbytes, rank, world):
    n = max(world, nbytes // 4 // world * world)
    t = torch.full((n,), float(rank + 1))
    if op == "allreduce":
        return dist.all_reduce(t, async_op=True)
    if op == "allgather":
        return dist.all_gather_into_tensor(torch.empty(n * world), t, async_op=True)
    if op == "reduce_scatter":
        return dist.reduce_scatter_tensor(torch.empty(n // world), t, async_op=True)
    if op == "alltoall":
        return dist.all_to_all_single(torch.empty(n), t, async_op=True)
    return dist.broadcast(t, src=0, async_op=True)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    victim, seed = int(os.environ["KILL_VICTIM"]), int(os.environ["KILL_SEED"])
    timeout_s = float(os.environ["KILL_TIMEOUT_S"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=60))
    store = dist.PrefixStore(f"round{seed}/", store)
    dist.init_process_group("hier", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    rng = random.Random(seed)
    kill_at = rng.randrange(4)
    plan = [(rng.choice(OPS), rng.choice(BYTES)) for _ in range(kill_at + 3)]
    kill_after_s = rng.uniform(0.0, 0.05)  # into the collective: before, during or after its data moves
    for i, (op, nbytes) in enumerate(plan):
        began = time.monotonic()
        try:
            work = start(op, nbytes, rank, world)
            if rank == victim and i == kill_at:
                time.sleep(kill_after_s)
                os.kill(os.getpid(), signal.SIGKILL)
            work.wait()
        except dist.DistBackendError as e:
            took = time.monotonic() - began
            text = str(e).split("\nException raised from")[0]
            dist.destroy_process_group()
            print(json.dumps(dict(rank=rank, failed_at=i, kill_at=kill_at, op=op, bytes=nbytes, took=took,
                                  error=text)), flush=True)
            return
    print(json.dumps(dict(rank=rank, failed_at=None, kill_at=kill_at, error="every collective succeeded")),
          flush=True)


if __name__ == "__main__":
    main()
