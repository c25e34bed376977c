"""Real multi-node jobs: torchrun on simulated hosts (cluster.py), c10d rendezvous, the collective suite
and a DDP run checked against Gloo on every rank. Layouts: 2 hosts x 2 ranks, 3 hosts x 1 rank, and an
uneven 2 + 1; and one host whose /dev/shm is too small for hier's shared memory."""

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
