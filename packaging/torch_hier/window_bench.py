"""hier's one-sided windows (dist._new_window) beside UCX's own ceiling, in one launch.

    torchrun --nproc-per-node 2 -m torch_hier.window_bench --max-bytes 64M

Between rank 0 (the origin) and the last rank (the target: on another host, where there are several):

  put bandwidth   the origin issues a burst of puts of S bytes into the target's window (asynchronous, as
                  many as UCX's perftest keeps in flight) and waits for all of them; the target consumes
                  their signals. Time per put, and S over it in GB/s (1e9 bytes), nccl-tests' algbw, equal
                  to busbw for a transfer between two ranks.
  signal latency  a ping-pong of signal / wait_signal, half the round trip
  put latency     a ping-pong of 8-byte puts (each carries its signal), half the round trip
  idle target     a synchronous 8-byte put while the target sleeps in Python, calling nothing of hier's:
                  the put lands through the target's progress thread
  send/recv       hier's own 8-byte send/recv ping-pong, the same calls' cost without a window

The ceiling, measured in the same run between the same two ranks: UCX's ``ucx_perftest`` (from the
libucx wheel) for ucp_put_bw at each size and for ucp_put_lat and tag_lat at 8 bytes, the target rank
serving and the origin connecting to it; ``hier/ucx`` is hier's time over UCX's (above 1: slower). A put
costs hier more than UCX's bare put because each put is followed by a flush (its data is visible at the
target) and a signal message: the price of wait_signal's guarantee.

Rank 0 prints a table and writes the figures as JSON.
"""

import argparse
import json
import os
import socket
import subprocess
import time

import torch
import torch.distributed as dist

WINDOW = 32  # puts in flight, as ucx_perftest's default window for bandwidth tests
LAT_ITERS = 2000


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def human(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n // size}{unit}"
    return str(n)


def perftest_command():
    """ucx_perftest of the libucx wheel hier runs on, and the environment that makes it load that UCX (not
    the system's); None without the wheel."""
    try:
        import libucx
    except ImportError:
        return None
    home = os.path.dirname(libucx.__file__)
    path = os.path.join(home, "bin", "ucx_perftest")
    if not os.access(path, os.X_OK):
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(home, "lib") + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    return path, env


def own_address():
    """The address peers reach this rank at: the source address of the route to MASTER_ADDR."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(master), 9))
        return s.getsockname()[0]


def perftest(role, store, tag, test, size, iters):
    """One ucx_perftest run between origin and target; the origin returns its Final row, in microseconds
    and MB/s as UCX prints them, or None where the binary is missing or failed."""
    command = perftest_command()
    if command is None:
        return None
    binary, env = command
    if role == "target":
        port = 20000 + (os.getpid() % 20000)
        server = subprocess.Popen([binary, "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=env)
        time.sleep(0.3)
        store.set(f"{tag}/server", f"{own_address()}:{port}")
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
        return None
    host, port = store.get(f"{tag}/server").decode().rsplit(":", 1)
    run = subprocess.run([binary, host, "-p", port, "-t", test, "-s", str(size), "-n", str(iters), "-w",
                          str(max(10, iters // 10))], capture_output=True, text=True, timeout=120, env=env)
    for line in run.stdout.splitlines():
        if line.startswith("Final:"):
            fields = line.split()
            return {"iters": int(fields[1]), "time_us": float(fields[4])}
    return None


def put_bandwidth(win, role, peer, size, iters):
    source = torch.ones(size, dtype=torch.uint8)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters // WINDOW):
        if role == "origin":
            works = [win.put(source, peer, 0, True) for _ in range(WINDOW)]
            for w in works:
                w.wait()
        elif role == "target":
            for _ in range(WINDOW):
                win.wait_signal(peer, False)
    return (time.perf_counter() - start) / (iters // WINDOW * WINDOW)


def ping_pong(role, send, receive):
    """Half the round trip of a ping-pong between origin and target: the origin sends, then receives; the
    target receives, then sends."""
    seconds = 0.0
    for iters in (100, LAT_ITERS):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            if role == "origin":
                send()
                receive()
            elif role == "target":
                receive()
                send()
        seconds = (time.perf_counter() - start) / iters / 2
    return seconds


def idle_target_put(win, role, peer, store):
    one = torch.ones(8, dtype=torch.uint8)
    dist.barrier()
    took = []
    if role == "target":
        time.sleep(1.0)  # nothing of hier's runs on this thread meanwhile
        store.set("window_bench/idle", "1")
        for _ in range(20):
            win.wait_signal(peer, False)
    elif role == "origin":
        time.sleep(0.2)
        for _ in range(20):
            start = time.perf_counter()
            win.put(one, peer, 0, False)
            took.append(time.perf_counter() - start)
        store.wait(["window_bench/idle"])
    return sorted(took)[len(took) // 2] if took else 0.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min-bytes", default="8")
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--json", default="bench-results/window.json")
    args = parser.parse_args(argv)

    dist.init_process_group("hier")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise SystemExit("window_bench needs two ranks or more")
    store = dist.distributed_c10d._get_default_store()
    origin, target = 0, world - 1
    role = "origin" if rank == origin else "target" if rank == target else None
    peer = target if rank == origin else origin
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    sizes = []
    s = parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= args.factor

    win = dist._new_window(torch.zeros(max(sizes), dtype=torch.uint8))
    rows = []
    for size in sizes:
        iters = max(WINDOW, min(2000, (256 << 20) // size // WINDOW * WINDOW))
        seconds = put_bandwidth(win, role, peer, size, iters)
        dist.barrier()
        ucx = perftest(role, store, f"window_bench/bw/{size}", "ucp_put_bw", size, iters) if role else None
        dist.barrier()
        if rank == origin:
            row = {"bytes": size, "hier_us": seconds * 1e6, "hier_GBps": size / seconds / 1e9}
            if ucx:
                row.update(ucx_us=ucx["time_us"], ucx_GBps=size / ucx["time_us"] / 1e3)
            rows.append(row)
    one = torch.ones(8, dtype=torch.uint8)
    waited = lambda: win.wait_signal(peer, False)  # noqa: E731
    latency = {"signal_us": ping_pong(role, lambda: win.signal(peer, False), waited) * 1e6,
               "put_us": ping_pong(role, lambda: win.put(one, peer, 0, False), waited) * 1e6,
               "idle_target_put_us": idle_target_put(win, role, peer, store) * 1e6,
               # hier's own 8-byte send/recv: what any point-to-point call costs, without a window
               "hier_sendrecv_us": ping_pong(role, lambda: dist.send(one, peer),
                                             lambda: dist.recv(one, peer)) * 1e6}
    dist.barrier()
    for test, name in (("tag_lat", "ucx_tag_us"), ("ucp_put_lat", "ucx_put_us")):
        got = perftest(role, store, f"window_bench/{test}", test, 8, LAT_ITERS) if role else None
        if got:
            latency[name] = got["time_us"]
        dist.barrier()
    win.tensor_deregister()

    if rank == origin:
        import torch_hier

        info = torch_hier.info()
        between = len(set(hosts)) > 1 and hosts[origin] != hosts[target]
        where = "another host" if between else "one host"
        transports = info.get("ucx_transports_between_hosts" if between else "ucx_transports_inside_host")
        print(f"# one-sided windows: rank {origin} puts into rank {target} ({where});"
              f" UCX {info.get('ucx_version')}, transports {transports}")
        print(f"{'bytes':>8} {'hier us':>10} {'hier GB/s':>10} {'ucx us':>10} {'ucx GB/s':>10} {'hier/ucx':>9}")
        for r in rows:
            ratio = f"{r['hier_us'] / r['ucx_us']:9.2f}" if "ucx_us" in r else f"{'-':>9}"
            ucx = f"{r['ucx_us']:10.2f} {r['ucx_GBps']:10.3f}" if "ucx_us" in r else f"{'-':>10} {'-':>10}"
            print(f"{human(r['bytes']):>8} {r['hier_us']:10.2f} {r['hier_GBps']:10.3f} {ucx} {ratio}")
        nan = float("nan")
        print(f"signal latency {latency['signal_us']:.2f} us (UCX's tag message {latency.get('ucx_tag_us', nan):.2f},"
              f" hier's send/recv {latency['hier_sendrecv_us']:.2f}); 8-byte put and its signal"
              f" {latency['put_us']:.2f} us (UCX's bare put {latency.get('ucx_put_us', nan):.2f}); a put into a"
              f" target asleep in Python {latency['idle_target_put_us']:.1f} us")
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"origin": origin, "target": target, "between_hosts": between, "puts": rows,
                       "latency": latency, "ucx_version": info.get("ucx_version")}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
