"""The hier demo job: every collective, a short benchmark table and a short DDP training run, on ``hier``
beside Gloo.

Launch it like any torch job::

    torchrun --nproc-per-node 4 -m torch_hier.demo

Every rank checks every result against values it computes itself; rank 0 prints what ran, whether it
was right, and how fast it was on hier and on Gloo (the same ranks, the same buffers).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def _say(*args):
    if dist.get_rank() == 0:
        print(*args, flush=True)


def _time(fn, group, iterations):
    fn(group)  # warm-up: connections, buffers
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iterations):
        fn(group)
    dist.barrier(group=group)
    return (time.perf_counter() - start) / iterations


def _collectives(world, rank, numel):
    """(name, run(group) -> None, check() -> bool) for each collective, on `numel` float32 elements."""
    data = torch.arange(numel, dtype=torch.float32) + rank
    state = {}

    def all_reduce(g):
        t = data.clone()
        dist.all_reduce(t, group=g)
        state["all_reduce"] = t

    def broadcast(g):
        t = data.clone()
        dist.broadcast(t, src=0, group=g)
        state["broadcast"] = t

    def reduce(g):
        t = data.clone()
        dist.reduce(t, dst=0, group=g)
        state["reduce"] = t

    def all_gather(g):
        out = torch.empty(world * numel)
        dist.all_gather_into_tensor(out, data, group=g)
        state["all_gather"] = out

    def reduce_scatter(g):
        out = torch.empty(numel // world)
        dist.reduce_scatter_tensor(out, data[: numel // world * world], group=g)
        state["reduce_scatter"] = out

    def all_to_all(g):
        out = torch.empty(numel // world * world)
        dist.all_to_all_single(out, data[: numel // world * world], group=g)
        state["all_to_all"] = out

    def gather(g):
        out = [torch.empty(numel) for _ in range(world)] if rank == 0 else None
        dist.gather(data, out, dst=0, group=g)
        state["gather"] = out

    def scatter(g):
        out = torch.empty(numel)
        dist.scatter(out, [data + r for r in range(world)] if rank == 0 else None, src=0, group=g)
        state["scatter"] = out

    def send_recv(g):
        peer = rank ^ 1
        if peer < world:
            out = torch.empty(numel)
            ops = [dist.P2POp(dist.isend, data, peer, g), dist.P2POp(dist.irecv, out, peer, g)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            state["send_recv"] = out

    def barrier(g):
        dist.barrier(group=g)

    base = torch.arange(numel, dtype=torch.float32)
    chunk = numel // world
    expected_sum = base * world + sum(range(world))
    checks = {
        "all_reduce": lambda: torch.equal(state["all_reduce"], expected_sum),
        "broadcast": lambda: torch.equal(state["broadcast"], base),
        "reduce": lambda: rank != 0 or torch.equal(state["reduce"], expected_sum),
        "all_gather": lambda: torch.equal(state["all_gather"], torch.cat([base + r for r in range(world)])),
        "reduce_scatter": lambda: torch.equal(state["reduce_scatter"], expected_sum[rank * chunk:(rank + 1) * chunk]),
        "all_to_all": lambda: torch.equal(state["all_to_all"], torch.cat(
            [base[rank * chunk:(rank + 1) * chunk] + r for r in range(world)])),
        "gather": lambda: rank != 0 or all(torch.equal(state["gather"][r], base + r) for r in range(world)),
        "scatter": lambda: torch.equal(state["scatter"], data),
        "send_recv": lambda: (rank ^ 1) >= world or torch.equal(state["send_recv"], base + (rank ^ 1)),
        "barrier": lambda: True,
    }
    fns = [all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter, send_recv, barrier]
    return [(fn.__name__, fn, checks[fn.__name__]) for fn in fns]


def run_collectives(gloo, sizes, iterations):
    world, rank = dist.get_world_size(), dist.get_rank()
    _say(f"\n== every collective, {world} ranks, float32; time per call (hier vs Gloo, same ranks and buffers)")
    _say(f"{'op':<16}{'size':>10}{'result':>9}{'hier':>12}{'gloo':>12}{'speed-up':>10}")
    all_right = True
    for numel in sizes:
        for name, fn, check in _collectives(world, rank, numel):
            t_hier = _time(fn, None, iterations)
            ok = torch.tensor([1 if check() else 0])
            t_gloo = _time(fn, gloo, iterations)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # right on every rank?
            all_right &= bool(ok.item())
            size = f"{numel * 4 / 1024:.0f} KiB" if numel * 4 < 1 << 20 else f"{numel * 4 >> 20} MiB"
            _say(f"{name:<16}{size:>10}{'ok' if ok.item() else 'WRONG':>9}{t_hier * 1e6:>10.0f}us"
                 f"{t_gloo * 1e6:>10.0f}us{t_gloo / t_hier:>9.1f}x")
    return all_right


def run_short_benchmark(gloo, sizes):
    """A few rows of torch_hier.bench's table: time, algbw and busbw (nccl-tests definitions) beside Gloo."""
    from torch_hier import bench

    _say(f"\n== benchmark, short version (python -m torch_hier.bench for the whole table)")
    settings = argparse.Namespace(warmup=2, iters=0, rounds=1, no_check=False)
    _, wrong = bench.measure(["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"], sizes,
                             torch.float32, {"hier": None, "gloo": gloo}, settings, _say)
    return wrong == 0


def run_ddp(gloo, steps):
    rank = dist.get_rank()
    _say(f"\n== DDP training, {steps} steps: the same model and data on hier and on Gloo")
    results = {}
    for name, group in (("hier", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))
        ddp = DDP(model, process_group=group, bucket_cap_mb=1)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
        target = torch.randn(64, 8, generator=torch.Generator().manual_seed(7))
        x = torch.randn(256, 64, generator=torch.Generator().manual_seed(100 + rank))
        y = x @ target
        losses = []
        start = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results[name] = (losses, (time.perf_counter() - start) / steps)
    for step in range(0, steps, max(1, steps // 5)):
        _say(f"step {step:3d}   loss on hier {results['hier'][0][step]:9.5f}   on gloo {results['gloo'][0][step]:9.5f}")
    same = all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(results["hier"][0], results["gloo"][0]))
    _say(f"final loss {results['hier'][0][-1]:.5f}; losses match Gloo's: {'yes' if same else 'NO'}; "
         f"step time {results['hier'][1] * 1e3:.1f} ms on hier, {results['gloo'][1] * 1e3:.1f} ms on Gloo")
    return same


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 262144], help="elements per collective")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20, help="DDP training steps")
    parser.add_argument("--bench-sizes", type=int, nargs="+", default=[4096, 1 << 20, 16 << 20],
                        help="bytes per benchmark row")
    args = parser.parse_args()

    dist.init_process_group("hier")
    gloo = dist.new_group(backend="gloo")
    host = os.uname().nodename
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, host)
    _say(f"hier demo: {dist.get_world_size()} ranks on {len(set(hosts))} host(s); backend '{dist.get_backend()}'")
    right = run_collectives(gloo, args.sizes, args.iterations)
    right &= run_short_benchmark(gloo, args.bench_sizes)
    same = run_ddp(gloo, args.steps)
    _say("\nall results right" if right and same else "\nSOMETHING WAS WRONG: see above")
    dist.destroy_process_group()
    if not (right and same):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
