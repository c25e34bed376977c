"""One round of test_peer_death.py, as every rank runs it on a simulated host. The round has a phase, drawn
from its seed: the victim SIGKILLs itself during the group's setup (init and the first connections), or at a
random point of one of a random sequence of small collectives, large ones, or point-to-point exchanges with
every other rank (all ranks run the same sequence, seeded alike). Each survivor prints one JSON line: the
operation it failed in (-1: the setup itself), how long that took, and the error. The ranks are forked by
launcher.py, which checks the host's /dev/shm once all have ended."""

import json
import os
import random
import signal
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

PHASES = ["setup", "small", "large", "p2p"]
OPS = ["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"]
BYTES = {"small": [8, 256, 4 << 10, 64 << 10], "large": [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20],
         "p2p": [64, 64 << 10, 1 << 20, 8 << 20]}


def start(op, nbytes, rank, world):
    n = max(world, nbytes // 4 // world * world)
    t = torch.full((n,), float(rank + 1))
    if op == "p2p":  # a message to and from every other rank, as one batch
        peers = [p for p in range(world) if p != rank]
        ops = [dist.P2POp(dist.isend, t, p) for p in peers]
        ops += [dist.P2POp(dist.irecv, torch.empty(n), p) for p in peers]
        return dist.batch_isend_irecv(ops)
    if op == "allreduce":
        return [dist.all_reduce(t, async_op=True)]
    if op == "allgather":
        return [dist.all_gather_into_tensor(torch.empty(n * world), t, async_op=True)]
    if op == "reduce_scatter":
        return [dist.reduce_scatter_tensor(torch.empty(n // world), t, async_op=True)]
    if op == "alltoall":
        return [dist.all_to_all_single(torch.empty(n), t, async_op=True)]
    return [dist.broadcast(t, src=0, async_op=True)]


def report(**fields):
    print(json.dumps(fields), flush=True)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    victim, seed = int(os.environ["KILL_VICTIM"]), int(os.environ["KILL_SEED"])
    timeout_s = float(os.environ["KILL_TIMEOUT_S"])
    rng = random.Random(seed)
    phase = rng.choice(PHASES)
    kill_at = 0 if phase == "setup" else rng.randrange(4)
    sizes = BYTES["large" if phase == "setup" else phase]
    plan = [("p2p" if phase == "p2p" else rng.choice(OPS), rng.choice(sizes)) for _ in range(kill_at + 3)]
    # Setup: anywhere from connecting to the store to the first operation's connections. Otherwise into the
    # operation: before, during or after its data moves.
    kill_after_s = rng.uniform(0.0, 0.4 if phase == "setup" else 0.002 if phase == "small" else 0.05)
    began = time.monotonic()
    if rank == victim and phase == "setup":
        threading.Timer(kill_after_s, os.kill, (os.getpid(), signal.SIGKILL)).start()
    try:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=timedelta(seconds=60))
        store = dist.PrefixStore(f"round{seed}/", store)
        dist.init_process_group("hier", store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
    except dist.DistError as e:
        report(rank=rank, phase=phase, failed_at=-1, kill_at=kill_at, op="init", bytes=0,
               took=time.monotonic() - began, error=str(e).split("\nException raised from")[0])
        return
    for i, (op, nbytes) in enumerate(plan):
        if phase != "setup":
            began = time.monotonic()
        try:
            works = start(op, nbytes, rank, world)
            if rank == victim and i == kill_at and phase != "setup":
                time.sleep(kill_after_s)
                os.kill(os.getpid(), signal.SIGKILL)
            for work in works:
                work.wait()
        except dist.DistBackendError as e:
            took = time.monotonic() - began
            text = str(e).split("\nException raised from")[0]
            dist.destroy_process_group()
            report(rank=rank, phase=phase, failed_at=i, kill_at=kill_at, op=op, bytes=nbytes, took=took, error=text)
            return
        if rank == victim and phase == "setup":
            time.sleep(10)  # the timer fires meanwhile: the victim never gets past its first operation
    report(rank=rank, phase=phase, failed_at=None, kill_at=kill_at, error="every operation succeeded")


if __name__ == "__main__":
    main()
