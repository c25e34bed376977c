"""Scale run: the largest job these machines hold, on hier or on Gloo, with what startup costs.

Each rank times init_process_group and its first collective (where hier's ranks learn each other), runs a
common workload (every collective on 1 MiB, checked against a local reference) and notes its memory;
with --suite, on hier, it then runs the collective suite of tests/python (every op, dtype and reduce op,
checked the same way), whose references 32 ranks on 24 GB cannot hold. Rank 0 prints one JSON line over
all ranks: medians and maxima of the times and of RSS.

    # 32 ranks on 8 simulated hosts, 4 per host, once per backend:
    python tests/multinode/cluster.py --hosts 8 --nproc-per-node 4 --shm-size 1g -- tests/multinode/scale_job.py --backend hier
    python tests/multinode/cluster.py --hosts 8 --nproc-per-node 4 --shm-size 1g -- tests/multinode/scale_job.py --backend gloo
"""

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from soak_job import memory  # noqa: E402

N = 1 << 18  # float32 elements: 1 MiB


def contribution(rank, n):
    """Rank `rank`'s input: small integers, so that every sum is exact in float32."""
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 11).to(torch.float32)


def workload():
    """Every collective once on 1 MiB per rank, each result against what the ranks' inputs give."""
    rank, world = dist.get_rank(), dist.get_world_size()
    inputs = [contribution(r, N) for r in range(world)]
    total = torch.stack(inputs).sum(0)
    mine = inputs[rank]

    t = mine.clone()
    dist.all_reduce(t)
    assert torch.equal(t, total), "all_reduce"

    t = mine.clone() if rank == 0 else torch.zeros(N)
    dist.broadcast(t, 0)
    assert torch.equal(t, inputs[0]), "broadcast"

    gathered = torch.empty(world * N)
    dist.all_gather_into_tensor(gathered, mine)
    assert torch.equal(gathered, torch.cat(inputs)), "all_gather_into_tensor"

    chunk = N // world
    out = torch.empty(chunk)
    dist.reduce_scatter_tensor(out, mine[: chunk * world].clone())
    assert torch.equal(out, total[rank * chunk:(rank + 1) * chunk]), "reduce_scatter_tensor"

    out = torch.empty(chunk * world)
    dist.all_to_all_single(out, mine[: chunk * world].clone())
    want = torch.cat([inputs[r][rank * chunk:(rank + 1) * chunk] for r in range(world)])
    assert torch.equal(out, want), "all_to_all_single"

    dist.barrier()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["hier", "gloo"], required=True)
    parser.add_argument("--suite", action="store_true",
                        help="on hier, run tests/python's collective suite too (its references take about 1.5 GB "
                             "a rank at 32 ranks: more than 24 GB holds)")
    args = parser.parse_args()

    start = time.perf_counter()
    dist.init_process_group(args.backend)
    init_s = time.perf_counter() - start
    start = time.perf_counter()
    one = torch.ones(1)
    dist.all_reduce(one)
    first_op_s = time.perf_counter() - start
    rank, world = dist.get_rank(), dist.get_world_size()
    failures = []
    if one.item() != world:
        failures.append(f"first all_reduce gave {one.item()}, not {world}")

    start = time.perf_counter()
    try:
        workload()
    except Exception:
        failures.append(f"workload: {traceback.format_exc()}")
    workload_s = time.perf_counter() - start
    rss_kib = memory()["rss_kib"]

    cases_s = None
    if args.backend == "hier" and args.suite:
        import test_collectives as cases

        start = time.perf_counter()
        for case in cases.OP_CASES:
            try:
                case(17)
            except Exception:
                failures.append(f"{case.__name__}: {traceback.format_exc()}")
        cases_s = time.perf_counter() - start

    row = dict(rank=rank, host=os.uname().nodename, init_s=init_s, first_op_s=first_op_s, workload_s=workload_s, rss_mib=rss_kib / 1024,
               cases_s=cases_s, failures=len(failures))
    rows = [None] * world
    dist.all_gather_object(rows, row)
    dist.destroy_process_group()
    if failures:
        print(f"rank {rank} FAILED:\n" + "\n".join(failures), flush=True)
    if rank == 0:
        def spread(key):
            values = [r[key] for r in rows]
            return dict(median=round(statistics.median(values), 3), max=round(max(values), 3))

        summary = dict(backend=args.backend, ranks=world, hosts=len({r["host"] for r in rows}),
                       init_s=spread("init_s"), first_op_s=spread("first_op_s"), workload_s=spread("workload_s"),
                       rss_mib=spread("rss_mib"), failed_ranks=sum(r["failures"] > 0 for r in rows))
        if cases_s is not None:
            summary["suite_s"] = spread("cases_s")
            summary["suite_cases"] = len(cases.OP_CASES)
        print("scale " + json.dumps(summary), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
