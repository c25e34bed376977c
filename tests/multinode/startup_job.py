"""What a job's start costs on hier or on Gloo: init, the first operation, a new group's first operation.

Each rank times init_process_group; waits, through the store, until every rank is past it (hier's init
makes no connection, so without this its first operation would carry the slowest rank's init as well);
times its first collective (a one-element allreduce: hier's ranks learn each other there); then
new_group over all ranks and that group's first collective. "first op as called" adds the wait for the
other ranks' init to the first collective: what a job's first step sees. Rank 0 prints one JSON line
with the median and maximum of each over all ranks; every result is checked. `--eager` runs hier with
HIER_EAGER_INIT=1, which moves the first operation's setup into init.

    # one host of 8 ranks, and 4 simulated hosts of 4:
    python tests/multinode/cluster.py --hosts 1 --nproc-per-node 8 -- tests/multinode/startup_job.py --backend hier
    python tests/multinode/cluster.py --hosts 4 --nproc-per-node 4 -- tests/multinode/startup_job.py --backend gloo

`python tests/multinode/startup_job.py --table` runs hier (lazy and eager) and Gloo at 2, 4, 8, 16 ranks on
one host and on 4 simulated hosts, and prints docs/scale.md's table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def job(backend, eager):
    if eager:
        os.environ["HIER_EAGER_INIT"] = "1"
    import torch
    import torch.distributed as dist

    start = time.perf_counter()
    dist.init_process_group(backend)
    init_s = time.perf_counter() - start
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    start = time.perf_counter()
    store.add("startup/arrived", 1)
    while int(store.add("startup/arrived", 0)) < world:
        time.sleep(0.0005)
    skew_s = time.perf_counter() - start

    start = time.perf_counter()
    one = torch.ones(1)
    dist.all_reduce(one)
    first_s = time.perf_counter() - start
    assert one.item() == world, one

    start = time.perf_counter()
    group = dist.new_group(list(range(world)))
    new_group_s = time.perf_counter() - start
    start = time.perf_counter()
    t = torch.full((1,), float(rank))
    dist.all_reduce(t, group=group)
    sub_first_s = time.perf_counter() - start
    assert t.item() == world * (world - 1) / 2, t

    row = dict(host=os.uname().nodename, init=init_s, first_op=first_s, first_op_as_called=skew_s + first_s,
               new_group=new_group_s, sub_group_first_op=sub_first_s)
    rows = [None] * world
    dist.all_gather_object(rows, row)
    dist.destroy_process_group()
    if rank == 0:
        summary = dict(backend=backend + (" (eager)" if eager else ""), ranks=world, hosts=len({r["host"] for r in rows}))
        for key in ("init", "first_op", "first_op_as_called", "new_group", "sub_group_first_op"):
            values = [r[key] * 1e3 for r in rows]
            summary[key + "_ms"] = [round(statistics.median(values), 1), round(max(values), 1)]
        print("startup " + json.dumps(summary), flush=True)


def table():
    layouts = [(1, n) for n in (2, 4, 8, 16)] + [(4, n // 4) for n in (4, 8, 16)]
    columns = ("init", "first_op", "first_op_as_called", "new_group", "sub_group_first_op")
    print("| hosts x ranks | backend | " + " | ".join(c.replace("_", " ") + " ms (median / max)" for c in columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for hosts, per_host in layouts:
        for backend, eager in (("hier", False), ("hier", True), ("gloo", False)):
            command = [sys.executable, os.path.join(HERE, "cluster.py"), "--hosts", str(hosts), "--nproc-per-node",
                       str(per_host), "--shm-size", "1g", "--", os.path.join(HERE, "startup_job.py"), "--backend",
                       backend] + (["--eager"] if eager else [])
            out = subprocess.run(command, capture_output=True, text=True, timeout=600).stdout
            lines = [line for line in out.splitlines() if "startup {" in line]
            if not lines:
                print(f"| {hosts} x {per_host} | {backend}{' (eager)' if eager else ''} | failed |", flush=True)
                continue
            s = json.loads(lines[-1].split("startup ", 1)[1])
            cells = " | ".join(f"{s[c + '_ms'][0]:.0f} / {s[c + '_ms'][1]:.0f}" for c in columns)
            print(f"| {hosts} x {per_host} | {s['backend']} | {cells} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["hier", "gloo"])
    parser.add_argument("--eager", action="store_true", help="HIER_EAGER_INIT=1: hier sets groups up as it makes them")
    parser.add_argument("--table", action="store_true", help="run every layout on both backends, print the table")
    args = parser.parse_args()
    if args.table:
        table()
    else:
        job(args.backend, args.eager)
