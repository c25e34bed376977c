"""Real multi-node jobs: torchrun on simulated hosts (cluster.py), c10d rendezvous, the collective suite
and a DDP run checked against Gloo on every rank. Layouts: 2 hosts x 2 ranks, 3 hosts x 1 rank, and an
uneven 2 + 1."""

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
