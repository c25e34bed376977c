"""Real multi-node jobs: torchrun on simulated hosts (cluster.py), c10d rendezvous, the collective suite
and a DDP run checked against Gloo on every rank. Layouts: 2 hosts x 2 ranks, 3 hosts x 1 rank, and an
uneven 2 + 1; one host whose /dev/shm is too small for hier's shared memory; torch_hier.bench across
rate-limited links, reporting the link bound; and hosts of two links, one per local rank."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cluster  # noqa: E402

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "job.py")
reason = cluster.available()


@pytest.mark.skipif(reason is not None, reason=reason or "")
@pytest.mark.parametrize("ranks_per_host", [[2, 2], [1, 1, 1], [2, 1]], ids=["2x2", "3x1", "2+1"])
def test_multinode_job(ranks_per_host):
    with cluster.Cluster(hosts=len(ranks_per_host)) as c:
        results = c.torchrun([JOB], ranks_per_host, env={"OMP_NUM_THREADS": "1"}, timeout=900)
    report = "\n".join(f"--- host{h}: exit {code}\n{out[-6000:]}" for h, (code, out) in enumerate(results))
    assert all(code == 0 for code, _ in results), report
    total = sum(ranks_per_host)
    oks = sum(out.count(" ok: ") for _, out in results)
    assert oks == total, f"expected {total} ranks to report ok:\n{report}"


@pytest.mark.skipif(reason is not None, reason=reason or "")
def test_the_benchmark_sets_hier_against_the_link_between_hosts(tmp_path):
    # Two hosts of one rank behind 200 Mbit/s links (cluster.py's token bucket): torch_hier.bench, told the
    # rate, reports each operation's link bound (the bytes that must cross a host's link over the rate)
    # and hier's share of it. No speed is asserted here, only that the bound is the one counted by hand.
    out = tmp_path / "bench.json"
    ops = ["allreduce", "allgather", "alltoall", "broadcast", "sendrecv", "barrier"]
    with cluster.Cluster(hosts=2, link_rate="200mbit") as c:
        results = c.torchrun(["-m", "torch_hier.bench", "--ops", *ops, "--min-bytes", "64K", "--max-bytes", "256K",
                              "--iters", "5", "--backends", "hier", "--link-rate", "200mbit", "--json", str(out),
                              "--plot", str(tmp_path / "bench.png")], 1, env={"OMP_NUM_THREADS": "1"}, timeout=600)
    report = "\n".join(f"--- host{h}: exit {code}\n{text[-4000:]}" for h, (code, text) in enumerate(results))
    assert all(code == 0 for code, _ in results), report
    bench = json.loads(out.read_text())
    assert bench["hosts"] == 2 and bench["link"] == {"rate_Bps": 25e6, "why_not": None}, bench
    assert "link%" in results[0][1], report
    # One rank a host: allreduce moves S each way (2 S (H-1)/H), allgather the other host's half, an
    # all-to-all half a rank's buffer, broadcast and send/recv the whole buffer; a barrier moves nothing.
    crossing = {"allreduce": 1.0, "allgather": 0.5, "alltoall": 0.5, "broadcast": 1.0, "sendrecv": 1.0}
    for row in bench["results"]:
        where = f"{row['op']} at {row['bytes']} B"
        assert row["hier"]["correct"], where
        if row["op"] == "barrier":
            assert "of_link" not in row, where
            continue
        assert row["link_bound_us"] == pytest.approx(crossing[row["op"]] * row["bytes"] / 25e6 * 1e6), where
        assert row["of_link"] == pytest.approx(row["link_bound_us"] / row["hier"]["time_us"]), where
    assert {row["op"] for row in bench["results"]} == set(ops)


@pytest.mark.skipif(reason is not None, reason=reason or "")
def test_two_links_a_host_carry_a_rail_each_and_equal_bytes(tmp_path):
    # Two hosts of two ranks, each host with two links (cluster.py's links=2: two interfaces, bridges and
    # subnets): local rank l's UCX takes eth<l> (transport/ucx/net_devices.h), and every card op then
    # moves as many bytes over each link. Bytes are counted, not timed (the benchmark times them).
    out = tmp_path / "bench.json"
    ops = ["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"]
    with cluster.Cluster(hosts=2, links=2, link_rate="400mbit") as c:
        before = c.bytes_sent()
        results = c.torchrun(["-m", "torch_hier.bench", "--ops", *ops, "--min-bytes", "4M", "--max-bytes", "4M",
                              "--iters", "3", "--backends", "hier", "--link-rate", "400mbit", "--links", "2",
                              "--json", str(out), "--plot", str(tmp_path / "bench.png")], 2,
                             env={"OMP_NUM_THREADS": "1"}, timeout=600)
        sent = [[b - a for a, b in zip(x, y)] for x, y in zip(before, c.bytes_sent())]
    report = "\n".join(f"--- host{h}: exit {code}\n{text[-4000:]}" for h, (code, text) in enumerate(results))
    assert all(code == 0 for code, _ in results), report
    bench = json.loads(out.read_text())
    assert all(row["hier"]["correct"] for row in bench["results"]), report
    assert {row["op"] for row in bench["results"]} == set(ops)
    assert bench["link"]["links"] == 2
    # Ranks 0 and 2 are local rank 0 of their hosts, 1 and 3 local rank 1.
    devices = [d.split(":")[0] for d in bench["ucx"]["net_devices"]]
    assert devices == ["eth0", "eth1", "eth0", "eth1"], bench["ucx"]
    assert bench["ucx"]["between_hosts"] == ["tcp/eth0", "tcp/eth1"], bench["ucx"]
    for host, (eth0, eth1) in enumerate(sent):
        assert min(eth0, eth1) > 10e6 and abs(eth0 - eth1) <= 0.15 * max(eth0, eth1), \
            f"host{host} sent {eth0} B on eth0 and {eth1} B on eth1: not balanced within 15%\n{report}"


@pytest.mark.skipif(reason is not None, reason=reason or "")
def test_a_host_whose_dev_shm_is_full_runs_everything_over_ucx():
    # 1 MiB of /dev/shm (a container's is often 64 MiB, shared by every group of every rank): the ranks'
    # shared-memory arena does not fit, which they must learn when they set it up, not by a SIGBUS at
    # its first use; the whole suite then runs over UCX.
    with cluster.Cluster(hosts=1, shm_size="1m") as c:
        (code, output), = c.torchrun([JOB], 3, env={"OMP_NUM_THREADS": "1"}, timeout=900)
    assert code == 0, output[-6000:]
    assert output.count(" ok: ") == 3, output[-6000:]
    assert "shared memory between the ranks of this host is unavailable" in output, output[-6000:]
    assert "No space left on device" in output, output[-6000:]


def test_cluster_cleans_up_after_a_failure():
    if reason is not None:
        pytest.skip(reason)
    c = cluster.Cluster(hosts=2)
    with pytest.raises(RuntimeError):
        with c:
            names = list(c.namespaces)
            raise RuntimeError("a test failing inside the cluster")
    listed = os.popen("ip netns list").read()
    assert not any(name in listed for name in names), listed
