"""Simulated hosts on one machine, for multi-node runs: each host a network namespace with its own IPC, UTS
and mount namespaces (its own hostname, its own /dev/shm and an /etc/hosts that names every simulated
host), all joined by a bridge that lives in a namespace of its own. With `links=N`, each host has N interfaces
(eth0 ... eth<N-1>), link k on bridge k and subnet 10.77.k.0/24, as a host with one NIC per rail; each
link rate-limited on its own with `link_rate`. The switch routes between the subnets, as a rail-optimised
fabric's spine does, so that every interface reaches every host (UCX checks a route per interface). Addresses exist only inside those namespaces; nothing is
added to the machine's own network. Needs root (ip netns).

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
    def __init__(self, hosts, link_rate=None, shm_size="2g", congestion_control="reno", links=1):
        self.hosts = hosts
        self.links = links
        self.link_rate = link_rate
        self.shm_size = shm_size
        self.congestion_control = congestion_control
        tag = uuid.uuid4().hex[:6]
        self.switch = f"hier-{tag}-sw"
        self.namespaces = [f"hier-{tag}-h{i}" for i in range(hosts)]
        self._created = []
        self._processes = []
        self._dir = None

    def address(self, host, link=0):
        return f"{SUBNET.rsplit('.', 1)[0]}.{link}.{host + 1}"

    def router(self, link):
        return self.address(253, link)  # .254: the switch's address on each link

    def interfaces(self):
        return [f"eth{k}" for k in range(self.links)]

    def bytes_sent(self):
        """Bytes each host sent on each of its links so far, [host][link], from the kernel's counters."""
        sent = []
        for ns in self.namespaces:
            row = []
            for iface in self.interfaces():
                out = subprocess.run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{iface}/statistics/tx_bytes"],
                                     check=True, capture_output=True, text=True).stdout
                row.append(int(out))
            sent.append(row)
        return sent

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
        for k in range(self.links):
            _ip("link", "add", f"br{k}", "type", "bridge", namespace=self.switch)
            _ip("link", "set", f"br{k}", "up", namespace=self.switch)
            if self.links > 1:
                _ip("addr", "add", f"{self.router(k)}/24", "dev", f"br{k}", namespace=self.switch)
        if self.links > 1:
            subprocess.run(["ip", "netns", "exec", self.switch, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
                           check=True, capture_output=True)
        for i, ns in enumerate(self.namespaces):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            self._created.append(ns)
            for k, iface in enumerate(self.interfaces()):
                port = f"port{i}l{k}"
                _ip("link", "add", iface, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
                _ip("link", "set", port, "master", f"br{k}", namespace=self.switch)
                _ip("link", "set", port, "up", namespace=self.switch)
                _ip("addr", "add", f"{self.address(i, k)}/24", "dev", iface, namespace=ns)
                _ip("link", "set", iface, "up", namespace=ns)
            for k, iface in enumerate(self.interfaces()):
                for j in range(self.links):
                    if j != k:  # the other rails' subnets through this link too, behind their own routes
                        _ip("route", "add", f"{self.address(-1, j).rsplit('.', 1)[0]}.0/24", "via", self.router(k),
                            "dev", iface, "metric", str(100 + k), namespace=ns)
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
            for iface in self.interfaces() if self.link_rate else []:
                # A network slower than the machine's memory, as between real hosts: each link's
                # outgoing traffic through a token bucket.
                subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", iface, "root", "tbf",
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
    parser.add_argument("--link-rate", help="limit each link's outgoing bandwidth (tc rate, e.g. 2gbit)")
    parser.add_argument("--links", type=int, default=1, help="links (interfaces, bridges, subnets) per host")
    parser.add_argument("--shm-size", default="2g", help="each host's /dev/shm (a tmpfs of this size)")
    parser.add_argument("--congestion-control", default="reno",
                        help="each host's TCP congestion control; '' keeps the machine's (see Cluster)")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="after --: what torchrun runs")
    args = parser.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    counts = [int(c) for c in args.nproc_per_node.split(",")]
    counts = counts if len(counts) > 1 else counts * args.hosts
    with Cluster(args.hosts, link_rate=args.link_rate, shm_size=args.shm_size,
                 congestion_control=args.congestion_control, links=args.links) as cluster:
        results = cluster.torchrun(program, counts, timeout=args.timeout)
        sent = cluster.bytes_sent()
    failed = False
    for host, (code, output) in enumerate(results):
        print(f"===== host{host}: exit {code}\n{output}", flush=True)
        failed |= code != 0
    for host, row in enumerate(sent):
        print(f"===== host{host} sent: " + ", ".join(f"eth{k} {b / 1e6:.1f} MB" for k, b in enumerate(row)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
