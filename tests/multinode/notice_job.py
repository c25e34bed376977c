"""A job of test_peer_death.py's notice test, as every rank runs it (forked by launcher.py, so a host's ranks
share its shared memory). After one allreduce that sets everything up, the ranks start a large one; inside
it rank 1 stops (SIGSTOP, alive: a helper process resumes it after STOP_S) and rank 3 dies (SIGKILL). Each
survivor prints one JSON line: how long its allreduce took to fail, and the error."""

import json
import os
import signal
import subprocess
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    rank, stop_s = int(os.environ["RANK"]), float(os.environ["STOP_S"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=60))
    store = dist.PrefixStore(f"notice{os.environ['ATTEMPT']}/", store)
    dist.init_process_group("hier", store=store, rank=rank, world_size=4,
                            timeout=timedelta(seconds=float(os.environ["TIMEOUT_S"])))
    t = torch.ones(16 << 20)
    dist.all_reduce(t)  # connections made, shared memory set up on both hosts
    dist.barrier()
    began = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    if rank == 1:
        time.sleep(0.05)  # past the agreement, into the data
        subprocess.Popen(["sh", "-c", f"sleep {stop_s}; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)
    if rank == 3:
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        work.wait()
        error = None
    except dist.DistBackendError as e:
        error = str(e).split("\nException raised from")[0]
    print(json.dumps(dict(rank=rank, took=time.monotonic() - began, error=error)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
