"""Soak: a long run of mixed operations on hier, every result checked against a local reference.

Every rank draws the same random sequence (one seed): the operation (every collective, uneven all-to-all,
point-to-point), its group (the world, a 3-rank group across hosts, a 2-rank one with a rank on each host,
and a 1-rank one), dtype, reduce op, root and size (0 to 16 MiB, log-uniform), and whether it runs async
(a few kept in flight) or not. Inputs are a formula of (operation, global rank, element), so each rank
computes what every result must be. After a warm-up the rank notes its memory (RSS), open file descriptors
and /dev/shm; at the end it prints one JSON line comparing them.

    # the long run (100,000 operations, 4 ranks on 2 simulated hosts):
    python tests/multinode/cluster.py --timeout 7200 --hosts 2 --nproc-per-node 2 -- tests/multinode/soak_job.py --ops 100000

CI runs a short one (tests/multinode/test_soak.py).
"""

import argparse
import ctypes
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]
OPS = ["allreduce", "broadcast", "allgather_into_tensor", "allgather", "reduce_scatter", "alltoall",
       "alltoall_uneven", "reduce", "gather", "scatter", "barrier", "sendrecv"]
TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 1e-2}
PERIOD = 4099
_libc = ctypes.CDLL("libc.so.6")


def tiled(pattern, n):
    return pattern.repeat((n + PERIOD - 1) // PERIOD)[:n]


def values(k, g, n, dtype, product=False):
    """Rank g's input to operation k: small integers, so that sums and products are exact in every dtype.
    The formula repeats every PERIOD elements, a prime, so a piece put at a wrong offset shows unless the
    offset is a multiple of it; and the reference is computed on one period and tiled, a copy rather
    than passes of int64 arithmetic over up to 16 Mi elements per rank."""
    v = (torch.arange(PERIOD, dtype=torch.int64) * 7 + g * 3 + k) % PERIOD % 4
    return tiled((v % 2 + 1 if product else v).to(dtype), n)


def reduced(k, ranks, n, dtype, op):
    """What reducing every rank's values(k, ...) with `op` gives, element by element (tiled like them)."""
    product = op == R.PRODUCT
    parts = [values(k, g, PERIOD, torch.int64, product) for g in ranks]
    out = parts[0].clone()
    for p in parts[1:]:
        if op in (R.SUM, R.AVG):
            out += p
        elif op == R.PRODUCT:
            out *= p
        elif op == R.MIN:
            out = torch.minimum(out, p)
        elif op == R.MAX:
            out = torch.maximum(out, p)
        elif op == R.BAND:
            out &= p
        elif op == R.BOR:
            out |= p
        elif op == R.BXOR:
            out ^= p
    if op == R.AVG:
        return tiled((out.to(torch.float64) / len(ranks)).to(dtype), n)
    return tiled(out.to(dtype), n)


def same(got, want, what):
    tol = TOLERANCE.get(want.dtype, 0.0)
    if tol:
        ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, want)
    if not ok:
        bad = (got.to(torch.float64) - want.to(torch.float64)).abs().argmax().item() if got.numel() else -1
        raise AssertionError(f"{what}: wrong result (first of {got.numel()} elements differ at {bad})")


def memory():
    _libc.malloc_trim(0)  # what the process holds, not what glibc keeps cached for reuse
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return dict(rss_kib=rss, fds=len(os.listdir("/proc/self/fd")),
                shm=len(os.listdir("/dev/shm")))


class Soak:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        world = dist.get_world_size()
        self.groups = [list(range(world)), [0, 1, 2] if world > 3 else [0, 1], [1, world - 1], [world - 1]]
        self.handles = [dist.group.WORLD] + [dist.new_group(g, backend="hier") for g in self.groups[1:]]
        self.me = dist.get_rank()
        self.pending = []
        self.counts = {}

    def step(self, k):
        rng = self.rng
        # Every draw happens on every rank, whether or not the rank is in the group: the sequences stay equal.
        op = rng.choice(OPS)
        which = rng.randrange(len(self.groups))
        ranks, pg = self.groups[which], self.handles[which]
        dtype = rng.choice(FLOATS + INTS)
        reduce_ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype in FLOATS else [R.BAND, R.BOR, R.BXOR])
        reduce_op = rng.choice(reduce_ops)
        nbytes = 0 if rng.random() < 0.05 else int(2 ** rng.uniform(0, 24))
        n = nbytes // torch.empty((), dtype=dtype).element_size()
        root = rng.randrange(len(ranks))
        splits = [[rng.randrange(0, max(1, n // len(ranks)) + 1) for _ in ranks] for _ in ranks]
        is_async = rng.random() < 0.5
        if self.me not in ranks:
            return
        self.counts[op] = self.counts.get(op, 0) + 1
        work, check = self.issue(op, k, ranks, pg, dtype, reduce_op, n, root, splits, is_async)
        self.pending.append((work, check, f"op {k} {op} on {ranks}, {dtype}, {n} elements"))
        if not is_async or len(self.pending) >= 4:
            self.drain()

    def drain(self):
        for work, check, what in self.pending:
            for w in work if isinstance(work, list) else [work]:
                if w is not None:
                    w.wait()
            check(what)
        self.pending = []

    def issue(self, op, k, ranks, pg, dtype, reduce_op, n, root, splits, is_async):
        g, world = self.me, len(ranks)
        i = ranks.index(g)
        mine = values(k, g, n, dtype, reduce_op == R.PRODUCT and op in ("allreduce", "reduce", "reduce_scatter"))
        kw = dict(group=pg, async_op=is_async)
        if op == "allreduce":
            t = mine.clone()
            return dist.all_reduce(t, op=reduce_op, **kw), lambda w: same(t, reduced(k, ranks, n, dtype, reduce_op), w)
        if op == "reduce":
            t = mine.clone()
            # Only the root's result is defined (the others' tensors may hold partial results).
            return (dist.reduce(t, group_dst=root, op=reduce_op, **kw),
                    lambda w: i != root or same(t, reduced(k, ranks, n, dtype, reduce_op), w))
        if op == "broadcast":
            t = mine.clone() if i == root else torch.zeros(n, dtype=dtype)
            return dist.broadcast(t, group_src=root, **kw), lambda w: same(t, values(k, ranks[root], n, dtype), w)
        everyone = lambda: torch.cat([values(k, r, n, dtype) for r in ranks])  # noqa: E731
        if op == "allgather_into_tensor":
            out = torch.empty(n * world, dtype=dtype)
            return dist.all_gather_into_tensor(out, mine, **kw), lambda w: same(out, everyone(), w)
        if op == "allgather":
            outs = [torch.empty(n, dtype=dtype) for _ in ranks]
            return dist.all_gather(outs, mine, **kw), lambda w: same(torch.cat(outs), everyone(), w)
        if op == "gather":
            outs = [torch.empty(n, dtype=dtype) for _ in ranks] if i == root else None
            return (dist.gather(mine, outs, group_dst=root, **kw),
                    lambda w: i != root or same(torch.cat(outs), everyone(), w))
        if op == "scatter":
            ins = [values(k, ranks[root] * 100 + j, n, dtype) for j in range(world)] if i == root else None
            out = torch.empty(n, dtype=dtype)
            return (dist.scatter(out, ins, group_src=root, **kw),
                    lambda w: same(out, values(k, ranks[root] * 100 + i, n, dtype), w))
        if op == "reduce_scatter":
            whole = values(k, g, n * world, dtype, reduce_op == R.PRODUCT)
            out = torch.empty(n, dtype=dtype)
            want = lambda: reduced(k, ranks, n * world, dtype, reduce_op)[i * n:(i + 1) * n]  # noqa: E731
            return dist.reduce_scatter_tensor(out, whole, op=reduce_op, **kw), lambda w: same(out, want(), w)
        if op == "alltoall":
            m = n - n % world
            out = torch.empty(m, dtype=dtype)
            c = m // world
            want = lambda: torch.cat([values(k, r, m, dtype)[i * c:(i + 1) * c] for r in ranks])  # noqa: E731
            return dist.all_to_all_single(out, values(k, g, m, dtype), **kw), lambda w: same(out, want(), w)
        if op == "alltoall_uneven":
            send = splits[i]
            recv = [splits[j][i] for j in range(world)]
            out = torch.empty(sum(recv), dtype=dtype)

            def want():
                parts = []
                for j, r in enumerate(ranks):
                    start = sum(splits[j][:i])
                    parts.append(values(k, r, sum(splits[j]), dtype)[start:start + splits[j][i]])
                return torch.cat(parts)

            return (dist.all_to_all_single(out, values(k, g, sum(send), dtype), recv, send, **kw),
                    lambda w: same(out, want(), w))
        if op == "barrier":
            return dist.barrier(**kw), lambda w: None
        # sendrecv: each rank sends to the next of the group and receives from the one before.
        if world == 1:
            return None, lambda w: None
        after, before = ranks[(i + 1) % world], ranks[(i - 1) % world]
        out = torch.empty(n, dtype=dtype)
        works = [dist.isend(mine, after, group=pg), dist.irecv(out, before, group=pg)]
        return works, lambda w: same(out, values(k, before, n, dtype), w)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=100000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before memory is noted")
    args = parser.parse_args()
    dist.init_process_group("hier")
    soak = Soak(args.seed)
    warm_at = max(1, int(args.ops * args.warmup))
    start, before, trace = time.monotonic(), None, []
    for k in range(args.ops):
        if k == warm_at:
            soak.drain()
            dist.barrier()
            before = memory()
        soak.step(k)
        if k % max(1, args.ops // 10) == 0:
            trace.append(memory()["rss_kib"] // 1024)
            if dist.get_rank() == 0 and args.ops >= 10000:
                print(f"[soak] {k} of {args.ops} operations, {time.monotonic() - start:.0f} s, RSS {trace[-1]} MiB",
                      flush=True)
    soak.drain()
    dist.barrier()
    after = memory()
    took = time.monotonic() - start
    dist.destroy_process_group()
    report = json.dumps(dict(rank=int(os.environ["RANK"]), ops=args.ops, seconds=round(took, 1), counts=soak.counts,
                             before=before, after=after, rss_mib_every_tenth=trace,
                             rss_growth=round(after["rss_kib"] / before["rss_kib"] - 1, 4)))
    # One write, line and newline together: the ranks of a host share torchrun's output, and an unbuffered
    # print() writes the newline on its own, so two ranks' lines could run into one.
    sys.stdout.write(report + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
