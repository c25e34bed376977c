"""hier beside its anchors, measured the nccl-tests way, in one launch.

    torchrun --nproc-per-node 2 -m torch_hier.bench --ops allreduce --max-bytes 64M

Every rank runs each operation on the same buffers with ``hier``, with ``gloo`` (a Gloo group over the
same ranks) and, once per operation at 1 KiB or less, with torch's ``fake`` backend, which moves nothing
over the network: its time is torch's own dispatch floor, what any backend pays before a byte moves (at
larger sizes fake copies buffers locally, which is no longer a floor). Backends alternate size by size
so machine drift hits all alike, and every hier and Gloo result is checked. Operation by operation, just
before the torch backends measure it, rank 0 runs the same points (element counts, iterations) through
Open MPI (``mpi_bench.c``, built with ``mpicc``; ``apt-get install openmpi-bin libopenmpi-dev`` provides
both) while the other ranks wait asleep, when Open MPI is installed and every rank is on one host; and
once more from Python (``mpi_py_bench.py``, through mpi4py), each call after torch's dispatch of the same
op on the fake backend, as a torch program's ranks would call it. With
``--rounds R`` all of that runs R times over, and each figure is the fastest of its R measurements: on a
shared VM the machine slows by 2-4x for seconds at a time (other tenants of the host), which can catch
hier in one round and Open MPI in another, and interference only ever adds time, so the fastest round
is each one's time without it.

Reported as nccl-tests does: time per operation (averaged over ranks), algbw = S/t with GB = 1e9 bytes,
busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (allgather, reduce_scatter, alltoall, gather, scatter), 1
(broadcast, reduce, send/recv); S is the whole buffer (for allgather, reduce_scatter, gather and scatter
the large side). Three ratios: ``gloo/hier`` (times; above 1 means hier is faster), ``own/mpi``, hier's
own time (its time minus the floor's) over Open MPI's whole time from C, and ``own/mpi4py``, hier's own
time over Open MPI's own time from Python (that loop's time minus its dispatch alone: ``mpi4py own``);
below 1 means hier is faster. The last sets like against like: a synchronising call made between two
stretches of Python waits for the slowest rank's Python, which a loop of C calls never does.
Measured in the same run, as ceilings: memcpy bandwidth (every rank copying at once), and point-to-point
bandwidth and latency between ranks 0 and 1 over UCX (hier's send/recv).

Across hosts, ``--link-rate 2gbit`` (each host's link, as tc writes rates; ``tests/multinode/cluster.py
--link-rate`` sets one up) adds the link bound: the bytes an operation cannot help moving through the
busiest host's link (``link_bytes``), over the rate, and ``link%``, that bound over hier's time (100%
would be the link's whole rate, headers included). ``--links 2`` counts two such links a host (one NIC
per rail; ``cluster.py --links 2``): the bound is over their sum. The header names the UCX transports
the ranks' connections took and each rank's network device (``torch_hier.info()``), as does the JSON.

With ``--device cuda`` the buffers live on each rank's GPU (``LOCAL_RANK`` modulo the GPUs there) and the
reference is ProcessGroupNCCL on the same ranks (``nccl/hier``, times); Gloo and Open MPI, which measure CPU
tensors, sit out, and the device's own copy bandwidth joins the ceilings. A CUDA call returns once it is
enqueued, so the table adds the host's time inside a call (``hier call``, ``nccl call``, us) beside the
device's time per operation. Several ranks on one GPU need their own ``NCCL_HOSTID`` each, or NCCL refuses
them (tests/gpu/bench.sh sets them).

Rank 0 prints a table and writes a JSON file and a PNG plot of busbw against size.
"""

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

OPS = ["allreduce", "allgather", "reduce_scatter", "alltoall", "alltoall_uneven", "broadcast", "reduce", "gather",
       "scatter", "sendrecv", "barrier"]
# The one measured, the references (Gloo for CPU tensors, NCCL for CUDA ones), torch's dispatch floor, the
# peer to beat on the CPU, from C (mpi) and from Python beside torch's dispatch, as hier is called (mpi4py).
BACKENDS = ["hier", "gloo", "nccl", "fake", "mpi", "mpi4py"]
DEFAULT_BACKENDS = {"cpu": ["hier", "gloo", "fake", "mpi", "mpi4py"], "cuda": ["hier", "nccl", "fake"]}
CPU_ONLY, CUDA_ONLY = {"gloo", "mpi", "mpi4py"}, {"nccl"}
MPI_TYPES = {"float32", "float64", "int32"}  # the dtypes mpi_bench.c and mpi_py_bench.py have an MPI type for


def parse_bytes(text):
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def human(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.0f}{unit}" if n % size == 0 or n >= 100 * size else f"{n / size:.1f}{unit}"
    return f"{n}B"


def bus_factor(op, n):
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reduce_scatter", "alltoall", "alltoall_uneven", "gather", "scatter"):
        return (n - 1) / n
    if op == "barrier":
        return 0.0
    return 1.0


def parse_rate(text):
    """A link rate as tc writes it ("2gbit", "500mbit", "100kbit", "1000000bit"): bytes a second."""
    t = text.strip().lower()
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if t.endswith(unit):
            try:
                return float(t[: -len(unit)]) * scale / 8
            except ValueError:
                break
    raise argparse.ArgumentTypeError(f"{text!r}: give a rate as tc does, such as 2gbit, 500mbit or 100kbit")


def link_bytes(op, size, hosts_of_ranks, nbytes_between=None):
    """The bytes that must cross the busiest host's link in one direction for `op`, whose whole buffer is
    `size` bytes (the bench's S), with rank r on host `hosts_of_ranks[r]`, as many ranks on every host:
    what any algorithm has to move between hosts, so that this over the link's rate bounds the operation's
    time from below. With H hosts: allreduce, 2S(H-1)/H in and out of every host (reduce-scatter, then
    allgather, between the hosts as between the nodes of a ring); allgather, reduce_scatter, gather and
    scatter, S(H-1)/H (the other hosts' parts, or their sums for this host's blocks, into every host, or
    the root's, or out of it); broadcast and reduce, S into or out of the root's host; all-to-all and
    send/recv, what ranks send to ranks on other hosts (`nbytes_between(s, d)`; S/n each for an even
    all-to-all). None where nothing has to cross (one host, barrier) or the hosts hold different numbers
    of ranks."""
    names = sorted(set(hosts_of_ranks))
    per_host = {h: hosts_of_ranks.count(h) for h in names}
    if len(names) < 2 or len(set(per_host.values())) != 1 or op == "barrier":
        return None
    h, n = len(names), len(hosts_of_ranks)
    if op == "allreduce":
        return 2 * size * (h - 1) / h
    if op in ("allgather", "reduce_scatter", "gather", "scatter"):
        return size * (h - 1) / h
    if op in ("broadcast", "reduce"):
        return size
    between = nbytes_between or (lambda s, d: size / n)
    if op == "sendrecv":
        between = (lambda s, d: size if d == s ^ 1 else 0)
    out, into = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    for s in range(n):
        for d in range(n):
            if hosts_of_ranks[s] != hosts_of_ranks[d]:
                out[hosts_of_ranks[s]] += between(s, d)
                into[hosts_of_ranks[d]] += between(s, d)
    return max(max(out.values()), max(into.values())) or None


def uneven_shares(s, d):
    """Rank s sends (1 + (s + d) % 3) units to rank d: uneven, the MoE pattern (mpi_bench.c does the same)."""
    return 1 + (s + d) % 3


def shape(op, nbytes, esize, world):
    """(elements in the whole buffer, S in bytes) of `op` at about `nbytes`: every buffer splits evenly over
    the ranks, as nccl-tests rounds; the uneven all-to-all's S is the bytes a rank sends, averaged over
    ranks. Shared by the torch backends and the Open MPI plan, so all move the same bytes."""
    if op == "barrier":
        return 0, 0
    count = max(world, nbytes // esize // world * world)
    if op == "alltoall_uneven":
        unit = max(1, count // max(sum(uneven_shares(s, d) for d in range(world)) for s in range(world)))
        return count, sum(uneven_shares(s, d) for s in range(world) for d in range(world)) * unit * esize // world
    return count, count * esize


class Case:
    """One operation at one size: buffers, the call, and the check of its result."""

    def __init__(self, op, nbytes, dtype, rank, world):
        self.op, self.rank, self.world = op, rank, world
        esize = torch.tensor([], dtype=dtype).element_size()
        count, self.nbytes = shape(op, nbytes, esize, world)
        self.count = count
        self.dtype = dtype
        part = count // world
        self.part = part
        self.fill = lambda r, n, offset=0: (torch.arange(n, dtype=torch.float64) % 97 + r * 3 + offset).to(dtype)
        if op == "allreduce":
            self.buf = torch.empty(count, dtype=dtype)
        elif op == "allgather":
            self.inp, self.out = self.fill(rank, part), torch.empty(count, dtype=dtype)
        elif op == "reduce_scatter":
            self.inp, self.out = self.fill(rank, count), torch.empty(part, dtype=dtype)
        elif op == "alltoall":
            self.inp, self.out = self.fill(rank, count), torch.empty(count, dtype=dtype)
        elif op == "alltoall_uneven":
            shares = self.shares = uneven_shares
            # One unit for every rank, so that what s sends d is what d expects from s.
            unit = self.unit = max(1, count // max(sum(shares(s, d) for d in range(world)) for s in range(world)))
            self.between = lambda s, d: shares(s, d) * unit * esize
            self.in_splits = [shares(rank, d) * unit for d in range(world)]
            self.out_splits = [shares(s, rank) * unit for s in range(world)]
            self.inp = self.fill(rank, sum(self.in_splits))
            self.out = torch.empty(sum(self.out_splits), dtype=dtype)
        elif op in ("broadcast", "reduce"):
            self.buf = torch.empty(count, dtype=dtype)
        elif op == "gather":
            # Every rank's part to rank 0, which holds the whole buffer.
            self.inp = self.fill(rank, part)
            self.parts = [torch.empty(part, dtype=dtype) for _ in range(world)] if rank == 0 else None
        elif op == "scatter":
            self.parts = [self.fill(d, part) for d in range(world)] if rank == 0 else None
            self.out = torch.empty(part, dtype=dtype)
        elif op == "sendrecv":
            self.buf = self.fill(rank, count)
        self.reset()

    def reset(self):
        if self.op in ("allreduce", "reduce", "broadcast"):
            self.buf.copy_(self.fill(self.rank, self.count))

    def run(self, group):
        op = self.op
        if op == "allreduce":
            dist.all_reduce(self.buf, group=group)
        elif op == "allgather":
            dist.all_gather_into_tensor(self.out, self.inp, group=group)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp, group=group)
        elif op == "alltoall":
            dist.all_to_all_single(self.out, self.inp, group=group)
        elif op == "alltoall_uneven":
            dist.all_to_all_single(self.out, self.inp, self.out_splits, self.in_splits, group=group)
        elif op == "broadcast":
            dist.broadcast(self.buf, src=0, group=group)
        elif op == "reduce":
            dist.reduce(self.buf, dst=0, group=group)
        elif op == "gather":
            dist.gather(self.inp, self.parts, dst=0, group=group)
        elif op == "scatter":
            dist.scatter(self.out, self.parts, src=0, group=group)
        elif op == "barrier":
            dist.barrier(group=group)
        elif op == "sendrecv":
            # Ranks pair up (0-1, 2-3, ...) and exchange buffers; an odd rank out sits it out.
            peer = self.rank ^ 1
            if peer < self.world:
                ops = [dist.P2POp(dist.isend, self.buf, peer, group),
                       dist.P2POp(dist.irecv, self.recv_buf(), peer, group)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

    def recv_buf(self):
        if not hasattr(self, "_recv"):
            self._recv = torch.empty_like(self.buf)
        return self._recv

    def check(self):
        """True when the last run's result is right."""
        op, r, n, part = self.op, self.rank, self.world, self.part
        everyone = lambda length, offset=0: [self.fill(s, length, offset) for s in range(n)]  # noqa: E731
        wide = lambda ts: torch.stack([t.double() for t in ts])  # noqa: E731
        close = lambda a, b: torch.allclose(a.double(), b.double(), rtol=1e-2 if self.dtype.itemsize == 2 else 1e-5)  # noqa: E731
        if op == "allreduce":
            return close(self.buf, wide(everyone(self.count)).sum(0))
        if op == "reduce":
            return r != 0 or close(self.buf, wide(everyone(self.count)).sum(0))
        if op == "broadcast":
            return torch.equal(self.buf, self.fill(0, self.count))
        if op == "allgather":
            return torch.equal(self.out, torch.cat(everyone(part)))
        if op == "reduce_scatter":
            return close(self.out, wide([t[r * part:(r + 1) * part] for t in everyone(self.count)]).sum(0))
        if op == "alltoall":
            return torch.equal(self.out, torch.cat([t[r * part:(r + 1) * part] for t in everyone(self.count)]))
        if op == "alltoall_uneven":
            expected = []
            for s in range(n):
                sent = [self.shares(s, d) * self.unit for d in range(n)]
                start = sum(sent[:r])
                expected.append(self.fill(s, sum(sent))[start:start + sent[r]])
            return torch.equal(self.out, torch.cat(expected))
        if op == "gather":
            return r != 0 or torch.equal(torch.cat(self.parts), torch.cat(everyone(part)))
        if op == "scatter":
            return torch.equal(self.out, self.fill(r, part))
        if op == "sendrecv":
            return (r ^ 1) >= n or torch.equal(self.recv_buf(), self.fill(r ^ 1, self.count))
        if op == "barrier":
            return True
        raise ValueError(op)


def finish_device():
    """Waits for what this rank's GPU holds (CUDA collectives return once enqueued); nothing on the CPU."""
    if torch.cuda.is_available() and torch.get_default_device().type == "cuda":
        torch.cuda.synchronize()


def timed(case, group, warmup, iters):
    """(seconds per call, from the first call to the device's end of the last; seconds the host spent
    inside each call), averaged over ranks. On the CPU the two are close; a CUDA call returns once it is
    enqueued, and its host time is what a training loop's host loses per collective."""
    for _ in range(max(warmup, iters // 10)):
        case.run(group)
    # The fences and the average go through the default (hier) group: the fake group moves nothing.
    finish_device()
    dist.barrier()
    held = 0.0
    start = time.perf_counter()
    for _ in range(iters):
        before = time.perf_counter()
        case.run(group)
        held += time.perf_counter() - before
    finish_device()
    dist.barrier()
    elapsed = (time.perf_counter() - start) / iters
    # Averaged over ranks, as nccl-tests reports.
    t = torch.tensor([elapsed, held / iters], dtype=torch.float64, device="cpu")
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return t[0].item(), t[1].item()


def iterations_for(nbytes, args):
    if args.iters:
        return args.iters
    # About 0.03 s of work per point at 1 GB/s, between 10 and 2000 iterations: fewer, and one scheduling
    # hiccup of this shared 2-core VM (a millisecond) decides the figure.
    return int(min(2000, max(10, 3e7 / max(nbytes, 1))))


def points(op, sizes, world):
    """The sizes `op` is measured at: one point for barrier, none for send/recv without a pair."""
    if op == "barrier":
        return sizes[:1]
    if op == "sendrecv" and world < 2:
        return []
    return sizes


def _why_no_mpirun(dtype_name):
    """Why Open MPI cannot run this benchmark's points here, or None when it can."""
    if dtype_name not in MPI_TYPES:
        return f"MPI has no type for {dtype_name}"
    if os.environ.get("LOCAL_WORLD_SIZE") != os.environ.get("WORLD_SIZE"):
        return "the ranks span hosts (mpirun would need ssh between them)"
    if not (shutil.which("mpicc") and shutil.which("mpirun")):
        return "Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    return None


def mpi_bench_binary(dtype_name):
    """The command that runs mpi_bench.c, built with mpicc, and why there is none when there is none."""
    why_not = _why_no_mpirun(dtype_name)
    if why_not is not None:
        return None, why_not
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_bench.c")
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    binary = os.path.join(tempfile.gettempdir(), f"torch_hier-mpi_bench-{digest}")
    if not os.path.exists(binary):
        built = subprocess.run([shutil.which("mpicc"), "-O2", "-o", binary + ".tmp", source], capture_output=True,
                               text=True)
        if built.returncode != 0:
            return None, f"mpicc failed: {built.stderr.strip()[-500:]}"
        os.replace(binary + ".tmp", binary)
    return [binary], None


def mpi_py_bench_command(dtype_name):
    """The command that runs mpi_py_bench.py (Open MPI through mpi4py, beside torch's dispatch), and why
    there is none when there is none."""
    why_not = _why_no_mpirun(dtype_name)
    if why_not is None and importlib.util.find_spec("mpi4py") is None:
        why_not = "mpi4py is not installed (pip install mpi4py; packaging/install.sh installs it)"
    return (None, why_not) if why_not else ([sys.executable, "-m", "torch_hier.mpi_py_bench"], None)


def mpi_times(program, op, sizes, dtype_name, world, args):
    """What `program` (mpi_bench.c's or mpi_py_bench.py's command) measured at every point of `op`, as
    {(op, element count): (seconds, ...)}, and why there is nothing when there is nothing. Rank 0 runs it
    while the other ranks wait in a barrier, asleep, leaving the cores to MPI."""
    esize = torch.tensor([], dtype=getattr(torch, dtype_name)).element_size()
    plan = []
    for nbytes in points(op, sizes, world):
        count, size = shape(op, nbytes, esize, world)
        plan.append(f"{op} {count} {args.warmup} {iterations_for(size, args)}")
    with tempfile.NamedTemporaryFile("w", suffix=".plan", delete=False) as f:
        f.write("\n".join(plan) + "\n")
    command = [shutil.which("mpirun"), "-np", str(world), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    try:
        ran = subprocess.run(command + program + [dtype_name, f.name], capture_output=True, text=True,
                             timeout=args.mpi_timeout)
    except subprocess.TimeoutExpired:
        return {}, f"Open MPI did not finish within {args.mpi_timeout} s"
    finally:
        os.unlink(f.name)
    if ran.returncode != 0:
        return {}, f"mpirun exited with {ran.returncode}: {(ran.stderr or ran.stdout).strip()[-500:]}"
    times = {}
    for line in ran.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] in OPS:
            times[(fields[0], int(fields[1]))] = tuple(float(x) for x in fields[2:])
    return times, None


def copy_bandwidth(device, nbytes):
    """GB/s of one buffer copied to another on `device`, every rank copying at once (averaged over ranks)."""
    finished = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    finished()
    dist.barrier()
    reps = 10
    start = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    finished()
    bw = nbytes * reps / (time.perf_counter() - start) / 1e9
    t = torch.tensor([bw], dtype=torch.float64, device="cpu")
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def ceilings(args):
    """memcpy bandwidth with every rank copying (and the GPU's, for CUDA tensors), and UCX point-to-point
    bandwidth and latency between CPU buffers."""
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"memcpy_GBps": copy_bandwidth(torch.device("cpu"), args.ceiling_bytes)}
    device = torch.get_default_device()
    if device.type == "cuda":
        result["device_copy_GBps"] = copy_bandwidth(device, args.ceiling_bytes)
    if world < 2:
        return result
    # Ping-pong between ranks 0 and 1: latency (half the round trip) at 8 B, bandwidth with a window of
    # 16 messages of 4 MiB (the osu_bw pattern).
    small, big = torch.ones(2, device="cpu"), torch.ones((4 << 20) // 4, device="cpu")
    lat = bw = 0.0
    if rank in (0, 1):
        peer = 1 - rank
        for phase in ("warm", "measure"):
            n = 20 if phase == "warm" else 1000
            start = time.perf_counter()
            for _ in range(n):
                if rank == 0:
                    dist.send(small, peer)
                    dist.recv(small, peer)
                else:
                    dist.recv(small, peer)
                    dist.send(small, peer)
            lat = (time.perf_counter() - start) / n / 2
        window = 16
        for phase in ("warm", "measure"):
            start = time.perf_counter()
            for _ in range(2 if phase == "warm" else 5):
                works = [(dist.isend if rank == 0 else dist.irecv)(big, peer) for _ in range(window)]
                for w in works:
                    w.wait()
                (dist.recv if rank == 0 else dist.send)(small, peer)  # the receiver's ack
            bw = big.numel() * 4 * window * 5 / (time.perf_counter() - start) / 1e9
    t = torch.tensor([lat, bw], dtype=torch.float64, device="cpu")
    dist.broadcast(t, src=0)
    result["p2p_latency_us"] = t[0].item() * 1e6
    result["p2p_GBps"] = t[1].item()
    return result


def plot(report, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Log axes: only what moved bytes at some speed (a barrier moves none, and has no plot).
    def plotted(r, backend):
        return backend in r and r["bytes"] > 0 and r[backend]["busbw_GBps"] > 0

    ops = sorted({r["op"] for r in report["results"] if plotted(r, "hier")}, key=OPS.index)
    if not ops:
        return False
    fig, axes = plt.subplots(len(ops), 1, figsize=(8, 3.2 * len(ops)), squeeze=False)
    for ax, op in zip(axes[:, 0], ops):
        rows = [r for r in report["results"] if r["op"] == op]
        for backend, style in (("hier", "o-"), ("gloo", "s--"), ("nccl", "d--"), ("mpi", "^-.")):
            pts = [(r["bytes"], r[backend]["busbw_GBps"]) for r in rows if plotted(r, backend)]
            if pts:
                ax.plot(*zip(*pts), style, label=backend)
        ax.axhline(report["ceilings"]["memcpy_GBps"], color="gray", linestyle=":", label="memcpy")
        if "device_copy_GBps" in report["ceilings"]:
            ax.axhline(report["ceilings"]["device_copy_GBps"], color="tab:purple", linestyle=":", label="GPU copy")
        if "p2p_GBps" in report["ceilings"]:
            ax.axhline(report["ceilings"]["p2p_GBps"], color="tab:green", linestyle=":", label="UCX p2p")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{op}, {report['world_size']} ranks, {report['dtype']} on {report['device']}")
        ax.set_xlabel("bytes")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # --json elsewhere made no folder for it
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="+", default=OPS, choices=OPS)
    parser.add_argument("--min-bytes", default="8")
    parser.add_argument("--max-bytes", default="256M")
    parser.add_argument("--factor", type=int, default=4, help="size step (nccl-tests -f)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16", "int32"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=0, help="iterations per point (default: scaled by size)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure everything this many times over, anchors included; report the fastest")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the buffers live")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS,
                        help="hier is always measured; fake is torch's dispatch floor, mpi is Open MPI from C, "
                        "mpi4py Open MPI from Python beside torch's dispatch; default: "
                        + "; ".join(f"{' '.join(b)} ({d})" for d, b in DEFAULT_BACKENDS.items()))
    parser.add_argument("--mpi-timeout", type=int, default=1200,
                        help="seconds one Open MPI run (one op's points) may take")
    parser.add_argument("--link-rate", type=parse_rate,
                        help="the rate of each host's link, as tc writes it (2gbit): across hosts, adds each "
                        "operation's link bound and hier's share of it (link%%)")
    parser.add_argument("--links", type=int, default=1,
                        help="links of --link-rate each per host (one NIC per rail): the bound is their sum's")
    parser.add_argument("--no-check", action="store_true", help="skip checking each measured result")
    parser.add_argument("--ceiling-bytes", type=parse_bytes, default=parse_bytes("64M"))
    parser.add_argument("--json", default="bench-results/bench.json")
    parser.add_argument("--plot", default="bench-results/bench.png")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: measure at least one round")
    if args.backends is None:
        args.backends = DEFAULT_BACKENDS[args.device]
    elsewhere = CUDA_ONLY if args.device == "cpu" else CPU_ONLY
    if set(args.backends) & elsewhere:
        parser.error(f"{', '.join(sorted(set(args.backends) & elsewhere))} cannot measure {args.device} tensors "
                     f"here; for --device {args.device} choose from {', '.join(sorted(set(BACKENDS) - elsewhere))}")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA GPU is visible to this torch")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        # Every buffer the cases make lands on this rank's GPU; the bookkeeping names the CPU.
        torch.set_default_device(f"cuda:{torch.cuda.current_device()}")

    sizes, s = [], parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= args.factor
    backends = ["hier"] + [b for b in args.backends if b != "hier"]

    dist.init_process_group("hier")
    groups = {"hier": None}
    for reference in ("gloo", "nccl"):
        if reference in backends:
            groups[reference] = dist.new_group(backend=reference)
    if "fake" in backends:
        importlib.import_module("torch.testing._internal.distributed.fake_pg")  # registers the fake backend
        groups["fake"] = dist.new_group(backend="fake")
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)

    def say(*a):
        if rank == 0:
            print(*a, flush=True)

    hosts = _gather_hosts()
    report = {"world_size": world, "dtype": args.dtype, "device": args.device, "hosts": len(set(hosts)),
              "rounds": args.rounds, "ceilings": ceilings(args), "results": []}
    c = report["ceilings"]
    say(f"# {world} ranks on {report['hosts']} host(s), {args.dtype} on {args.device}; "
        f"ceilings: memcpy {c['memcpy_GBps']:.2f} GB/s"
        + (f", GPU copy {c['device_copy_GBps']:.1f} GB/s" if "device_copy_GBps" in c else "")
        + (f", UCX p2p {c['p2p_GBps']:.2f} GB/s and {c['p2p_latency_us']:.1f} us" if "p2p_GBps" in c else ""))
    report["ucx"] = _gather_transports()
    u = report["ucx"]
    say(f"# UCX between hosts: {', '.join(u['between_hosts']) or 'none yet'}; inside a host: "
        f"{', '.join(u['inside_host']) or 'none yet'}; network devices by rank: "
        + ", ".join(d.split(':')[0] for d in u["net_devices"]))
    mpi = None
    anchors = {"mpi": (mpi_bench_binary, "Open MPI"),
               "mpi4py": (mpi_py_bench_command, "Open MPI from Python (mpi4py), beside torch's dispatch")}
    if any(b in backends for b in anchors):
        programs = {b: anchors[b][0](args.dtype) if rank == 0 else (None, None) for b in anchors if b in backends}
        mpi = MpiAnchor(programs, args.dtype, sizes, args)
        for b, (command, why_not) in programs.items():
            say(f"# {anchors[b][1]}: " + ("op by op, by rank 0, the other ranks asleep" if command else
                                          f"no column: {why_not}"))
    link = None
    if args.link_rate is not None:
        counts = {h: hosts.count(h) for h in hosts}
        why_not = ("every rank is on one host" if len(counts) < 2 else
                   "the hosts hold different numbers of ranks" if len(set(counts.values())) > 1 else None)
        report["link"] = {"rate_Bps": args.link_rate, "why_not": why_not}
        if args.links != 1:
            report["link"]["links"] = args.links
        link = None if why_not else (hosts, args.link_rate * args.links)
        links = f"{args.links} x " if args.links != 1 else ""
        say(f"# link: {links}{args.link_rate * 8 / 1e9:g} Gbit/s a host"
            + (f"; no column: {why_not}" if why_not else "; link% = the link bound's time over hier's"))
    if args.rounds > 1:
        say(f"# each figure: the fastest of {args.rounds} rounds")
    results, failures = measure(args.ops, sizes, dtype, {b: groups[b] for b in backends if b in groups}, args,
                                say, mpi=mpi, link=link)
    report["results"] = results
    if mpi is not None:
        for b in mpi.programs:
            report[b] = {"measured": b in mpi.measured, "why_not": mpi.why_not[b]}
    if rank == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        try:
            plotted = plot(report, args.plot)
            say(f"\nwrote {args.json}" + (f" and {args.plot}" if plotted else " (nothing to plot)"))
        except ImportError:
            say(f"\nwrote {args.json} (no matplotlib: no plot)")
        except Exception:  # the plot is a picture of the JSON: it never costs the run its results
            say(f"\nwrote {args.json}; the plot failed:\n{traceback.format_exc()}")
    dist.destroy_process_group()
    if failures:
        raise SystemExit(f"{failures} measured results were wrong")


def measure(ops, sizes, dtype, groups, args, say, mpi=None, link=None):
    """Times every op at every size on every backend of `groups` (hier first), `args.rounds` times over,
    checking hier's and Gloo's results each time; `mpi` (an MpiAnchor) runs Open MPI on the same points
    op by op, from C and from Python, each round just before the torch backends; `link` (each rank's
    host, the link's bytes a second) adds the link bound. Prints the table through `say`, each figure the
    fastest of its rounds. Returns (rows, number of wrong results)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    backends = [b for b in groups if b != "fake"]
    anchors = list(mpi.programs) if mpi is not None else []
    columns = backends + [b for b in anchors if b == "mpi"]
    floors = "fake" in groups
    # Open MPI from Python shows its own time (beside its own dispatch floor), to set hier's own against.
    from_python = "mpi4py" in anchors
    reference = next((b for b in ("gloo", "nccl") if b in columns), None)
    # CUDA calls return once enqueued: the host's time inside a call is a figure of its own (hier's and the
    # reference's), beside the device's time per operation (the us columns).
    on_device = torch.get_default_device().type == "cuda" and reference is not None
    header = f"{'op':<16}{'bytes':>8}{'hier us':>11}{'algbw':>8}{'busbw':>8}"
    for b in columns[1:]:
        header += f"{b + ' us':>11}{'busbw':>8}"
    header += (f"{'floor us':>10}" if floors else "") + (f"{reference + '/hier':>10}" if reference else "") + (
        f"{'own/mpi':>9}" if floors and "mpi" in columns else "") + (
        f"{'mpi4py own':>12}{'own/mpi4py':>12}" if floors and from_python else "") + (
        f"{'link%':>7}" if link else "") + (f"{'hier call':>10}{reference + ' call':>10}" if on_device else "") + f"{'ok':>4}"
    rows, failures = [], 0
    for op in ops:
        op_sizes = points(op, sizes, world)
        if not op_sizes:
            continue
        # Seconds per call, by size then backend ("mpi", "floor", and "mpi4py" with its own floor among
        # them), one entry per round.
        times = [{} for _ in op_sizes]
        calls = [{} for _ in op_sizes]  # the host's seconds inside a call, likewise
        shapes, correct = [(0, 0)] * len(op_sizes), [True] * len(op_sizes)  # (count, S) of each size
        crossing = [None] * len(op_sizes)  # the bytes that must cross the busiest host's link
        for _ in range(args.rounds):
            found = mpi.run(op) if mpi is not None else {}
            floor = None
            if floors:
                small = Case(op, min(op_sizes[0], 1024), dtype, rank, world)
                floor = timed(small, groups["fake"], args.warmup, iterations_for(small.nbytes, args))[0]
            for index, nbytes in enumerate(op_sizes):
                case = Case(op, nbytes, dtype, rank, world)
                shapes[index] = (case.count, case.nbytes)
                if link:
                    crossing[index] = link_bytes(op, case.nbytes, link[0], getattr(case, "between", None))
                order = backends if index % 2 == 0 else list(reversed(backends))
                for backend in order:
                    t, held = timed(case, groups[backend], args.warmup, iterations_for(case.nbytes, args))
                    times[index].setdefault(backend, []).append(t)
                    calls[index].setdefault(backend, []).append(held)
                    if not args.no_check:
                        case.reset()
                        case.run(groups[backend])
                        right = torch.tensor([1 if case.check() else 0], device="cpu")
                        dist.all_reduce(right, op=dist.ReduceOp.MIN)
                        correct[index] &= bool(right.item())
                if floor is not None:
                    times[index].setdefault("floor", []).append(floor)
                if (op, case.count) in found.get("mpi", {}):
                    times[index].setdefault("mpi", []).append(found["mpi"][(op, case.count)][0])
                if (op, case.count) in found.get("mpi4py", {}):
                    with_floor, its_floor = found["mpi4py"][(op, case.count)]
                    times[index].setdefault("mpi4py", []).append(with_floor)
                    times[index].setdefault("mpi4py floor", []).append(its_floor)
        say("\n" + header)
        for index, (count, size) in enumerate(shapes):
            row = {"op": op, "bytes": size, "count": count}
            for backend, seconds in times[index].items():
                if backend == "floor":
                    row["floor_us"] = min(seconds) * 1e6
                    row["floor_rounds_us"] = [t * 1e6 for t in seconds]
                    continue
                if backend == "mpi4py":
                    # Open MPI's own time from Python, its fastest round less its fastest floor, as hier's
                    # own time is; no bandwidth, as hier's own time has none.
                    floors_us = [t * 1e6 for t in times[index]["mpi4py floor"]]
                    row["mpi4py"] = {"own_us": min(seconds) * 1e6 - min(floors_us),
                                     "rounds_us": [t * 1e6 for t in seconds], "floor_rounds_us": floors_us}
                    continue
                if backend == "mpi4py floor":
                    continue
                row[backend] = _figures(op, size, world, min(seconds))
                row[backend]["rounds_us"] = [t * 1e6 for t in seconds]
                if backend in calls[index]:
                    row[backend]["call_us"] = min(calls[index][backend]) * 1e6
                if backend != "mpi" and not args.no_check:
                    row[backend]["correct"] = correct[index]
            ok = correct[index]
            if reference in row:
                row[f"{reference}_over_hier"] = row[reference]["time_us"] / row["hier"]["time_us"]
            if "floor_us" in row and "mpi" in row:
                # hier's own time: what it adds to torch's dispatch floor, against MPI's whole operation.
                row["own_over_mpi"] = (row["hier"]["time_us"] - row["floor_us"]) / row["mpi"]["time_us"]
            if "floor_us" in row and "mpi4py" in row and row["mpi4py"]["own_us"] > 0:
                # The same two own times set side by side: what each adds to a torch program's loop.
                row["own_over_mpi4py"] = (row["hier"]["time_us"] - row["floor_us"]) / row["mpi4py"]["own_us"]
            if crossing[index]:
                # The link bound's time over hier's: 1 would be the link's whole rate, headers included
                # (TCP over a 1500-byte MTU carries about 95.6% of it as data).
                row["link_bound_us"] = crossing[index] / link[1] * 1e6
                row["of_link"] = row["link_bound_us"] / row["hier"]["time_us"]
            failures += 0 if ok else 1
            h = row["hier"]
            line = f"{op:<16}{human(size):>8}{h['time_us']:>11.1f}{h['algbw_GBps']:>8.2f}{h['busbw_GBps']:>8.2f}"
            for b in columns[1:]:
                line += f"{row[b]['time_us']:>11.1f}{row[b]['busbw_GBps']:>8.2f}" if b in row else f"{'-':>11}{'-':>8}"
            if floors:
                line += f"{row['floor_us']:>10.1f}"
            if reference:
                line += f"{row[reference + '_over_hier']:>9.1f}x"
            if floors and "mpi" in columns:
                line += f"{row['own_over_mpi']:>9.2f}" if "own_over_mpi" in row else f"{'-':>9}"
            if floors and from_python:
                line += (f"{row['mpi4py']['own_us']:>12.1f}{row['own_over_mpi4py']:>12.2f}" if "own_over_mpi4py" in row
                         else f"{'-':>12}{'-':>12}")
            if link:
                line += f"{row['of_link'] * 100:>6.1f}%" if "of_link" in row else f"{'-':>7}"
            if on_device:
                line += f"{h['call_us']:>10.1f}" + (f"{row[reference]['call_us']:>10.1f}" if reference in row else f"{'-':>10}")
            line += f"{'' if args.no_check else ('yes' if ok else 'NO'):>4}"
            say(line)
            rows.append(row)
    return rows, failures


class MpiAnchor:
    """Open MPI on the benchmark's points, op by op: rank 0 runs each program (mpi_bench.c, from C;
    mpi_py_bench.py, from Python beside torch's dispatch) while every other rank waits in a barrier of the
    default group, asleep. `programs`: {"mpi" or "mpi4py": (command, why there is none)}; a program's
    first failure ends it and is kept as its why_not."""

    def __init__(self, programs, dtype_name, sizes, args):
        self.programs = {b: command for b, (command, _) in programs.items()}
        self.why_not = {b: why_not for b, (_, why_not) in programs.items()}
        self.dtype_name, self.sizes, self.args = dtype_name, sizes, args
        self.measured = set()

    def run(self, op):
        """{anchor: {(op, element count): its figures}} for `op`'s points."""
        found = {}
        for b, command in self.programs.items():
            if dist.get_rank() != 0 or command is None:
                continue
            found[b], why_not = mpi_times(command, op, self.sizes, self.dtype_name, dist.get_world_size(), self.args)
            if why_not is not None:
                self.programs[b], self.why_not[b] = None, f"{op}: {why_not}"
                print(f"# {b} failed ({self.why_not[b]}): no column from here on", flush=True)
            if found[b]:
                self.measured.add(b)
        dist.barrier()
        return found


def _figures(op, nbytes, world, seconds):
    algbw = nbytes / seconds / 1e9
    return {"time_us": seconds * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(op, world)}


def _gather_transports():
    """What every rank's UCX connected with so far (torch_hier.info()), merged: the transports between hosts
    and inside one, and each rank's network devices (with why)."""
    import torch_hier

    info = torch_hier.info()
    mine = (info["ucx_transports_between_hosts"], info["ucx_transports_inside_host"], info["ucx_net_devices"])
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return {"between_hosts": sorted({t for m in every for t in m[0]}),
            "inside_host": sorted({t for m in every for t in m[1]}),
            "net_devices": [m[2] for m in every]}


def _gather_hosts():
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, os.uname().nodename)
    return hosts


if __name__ == "__main__":
    main()
