"""Simulated hosts on one machine, for multi-node runs: each host a network namespace with its own IPC, UTS
and mount namespaces (its own hostname, its own /dev/shm and an /etc/hosts that names every simulated
host), all joined by a bridge that lives in a namespace of its own. Addresses exist only inside those
namespaces (10.77.0.0/24); nothing is added to the machine's own network. Needs root (ip netns).

As a library::

    with Cluster(hosts=2) as cluster:
        results = cluster.torchrun(["-m", "torch_hier.demo"], nproc_per_node=[2, 2])

From the command line (prints every host's output, exits non-zero when any host failed)::

    python tests/multinode/cluster.py --hosts 2 --nproc-per-node 2 -- -m torch_hier.bench --ops allreduce

The namespaces are removed on exit, on an exception and on SIGINT/SIGTERM.
"""

import argparse
import atexit
import os
import signal
import subprocess
import sys
import tempfile
import uuid

SUBNET = "10.77.0"
RDZV_PORT = 29400


def available():
    """Why simulated hosts cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "simulated hosts need root (ip netns, unshare)"
    for tool in ("ip", "unshare"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"simulated hosts need '{tool}' (Debian: iproute2, util-linux)"
    return None


def _ip(*args, namespace=None):
    command = (["ip", "netns", "exec", namespace] if namespace else []) + ["ip", *args]
    subprocess.run(command, check=True, capture_output=True)


class Cluster:
    def __init__(self, hosts, link_rate=None, shm_size="2g", congestion_control="reno"):
        self.hosts = hosts
        self.link_rate = link_rate
        self.shm_size = shm_size
        self.congestion_control = congestion_control
        tag = uuid.uuid4().hex[:6]
        self.switch = f"hier-{tag}-sw"
        self.namespaces = [f"hier-{tag}-h{i}" for i in range(hosts)]
        self._created = []
        self._processes = []
        self._dir = None

    def address(self, host):
        return f"{SUBNET}.{host + 1}"

    def __enter__(self):
        reason = available()
        if reason:
            raise RuntimeError(reason)
        atexit.register(self.close)
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(sig)

            def handler(signum, frame, previous=previous):
                self.close()
                if callable(previous):
                    previous(signum, frame)
                raise SystemExit(128 + signum)

            signal.signal(sig, handler)
        try:
            self._build()
        except Exception:
            self.close()
            raise
        return self

    def _build(self):
        self._dir = tempfile.TemporaryDirectory(prefix="hier-cluster-")
        with open(os.path.join(self._dir.name, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n")
            for i in range(self.hosts):
                f.write(f"{self.address(i)} host{i}\n")
        subprocess.run(["ip", "netns", "add", self.switch], check=True)
        self._created.append(self.switch)
        _ip("link", "add", "br0", "type", "bridge", namespace=self.switch)
        _ip("link", "set", "br0", "up", namespace=self.switch)
        for i, ns in enumerate(self.namespaces):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            self._created.append(ns)
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"port{i}", "netns", self.switch)
            _ip("link", "set", f"port{i}", "master", "br0", namespace=self.switch)
            _ip("link", "set", f"port{i}", "up", namespace=self.switch)
            _ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", namespace=ns)
            _ip("link", "set", "eth0", "up", namespace=ns)
            _ip("link", "set", "lo", "up", namespace=ns)
            if self.congestion_control:
                # A namespace starts with the machine's congestion control. Where that is BBR (this kind of
                # VM), TCP paces itself by timer, as there is no fq qdisc here, and through the token
                # bucket below that stalled 1 MiB all-to-alls by 40-60 ms at random (6 stalls in 800
                # operations; 0 with reno or cubic). Reno is built into every kernel, and a namespace may
                # choose it where cubic may not be allowed.
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                                f"net.ipv4.tcp_congestion_control={self.congestion_control}"],
                               check=True, capture_output=True)
            if self.link_rate:
                # A network slower than the machine's memory, as between real hosts: each host's
                # outgoing traffic through a token bucket.
                subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                                "rate", self.link_rate, "burst", "1mb", "latency", "100ms"],
                               check=True, capture_output=True)

    def close(self):
        for p in self._processes:
            if p.poll() is None:
                p.kill()
                p.wait()
        self._processes = []
        for ns in reversed(self._created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._created = []
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __exit__(self, *exc):
        self.close()

    def popen(self, host, argv, env=None, **kwargs):
        """Starts `argv` on simulated host `host` (hostname host<i>, its own IPC namespace)."""
        environment = dict(os.environ)
        # Gloo and UCX must talk over the host's veth, the only way to the other hosts.
        environment.update(GLOO_SOCKET_IFNAME="eth0", UCX_WARN_UNUSED_ENV_VARS="n")
        environment.update(env or {})
        hosts = os.path.join(self._dir.name, "hosts")
        setup = (f'hostname "$0" && mount --bind {hosts} /etc/hosts '
                 f'&& mount -t tmpfs -o size={self.shm_size} tmpfs /dev/shm && exec "$@"')
        command = ["ip", "netns", "exec", self.namespaces[host], "unshare", "--ipc", "--uts", "--mount", "--",
                   "sh", "-c", setup, f"host{host}", *argv]
        process = subprocess.Popen(command, env=environment, **kwargs)
        self._processes.append(process)
        return process

    def torchrun(self, program, nproc_per_node, env=None, timeout=600):
        """Runs `torchrun <program>` on every host with c10d rendezvous on host 0. `nproc_per_node` is an
        int or one int per host (uneven layouts). Returns [(returncode, output)] by host."""
        counts = nproc_per_node if isinstance(nproc_per_node, list) else [nproc_per_node] * self.hosts
        processes = []
        for host, count in enumerate(counts):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.hosts),
                    "--nproc-per-node", str(count), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"{self.address(0)}:{RDZV_PORT}", "--rdzv-id", self.switch,
                    "--max-restarts", "0", *program]
            processes.append(self.popen(host, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True))
        results = []
        for p in processes:
            try:
                output, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                output, _ = p.communicate()
                output += f"\n[cluster] killed after {timeout} s"
            results.append((p.returncode, output))
        return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--nproc-per-node", default="2", help="one number, or one per host: 2,1")
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--link-rate", help="limit each host's outgoing bandwidth (tc rate, e.g. 2gbit)")
    parser.add_argument("--shm-size", default="2g", help="each host's /dev/shm (a tmpfs of this size)")
    parser.add_argument("--congestion-control", default="reno",
                        help="each host's TCP congestion control; '' keeps the machine's (see Cluster)")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="after --: what torchrun runs")
    args = parser.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    counts = [int(c) for c in args.nproc_per_node.split(",")]
    counts = counts if len(counts) > 1 else counts * args.hosts
    with Cluster(args.hosts, link_rate=args.link_rate, shm_size=args.shm_size,
                 congestion_control=args.congestion_control) as cluster:
        results = cluster.torchrun(program, counts, timeout=args.timeout)
    failed = False
    for host, (code, output) in enumerate(results):
        print(f"===== host{host}: exit {code}\n{output}", flush=True)
        failed |= code != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
