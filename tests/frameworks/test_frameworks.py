"""The frameworks people launch with, each run twice on the same seeds: on hier and on Gloo. The two runs
must agree bit for bit (each sum the jobs make is over two ranks: the same in any order), each run's own
checks must hold, and the hier run's collectives must have gone through hier (its work table saw them).

Each job is a script in jobs/, launched as its users launch it (torchrun; torchft's Lighthouse and
replicas), in its own processes. The wall time of each run goes into the table printed at the end.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

JOBS = os.path.join(os.path.dirname(__file__), "jobs")
TIMEOUT_S = 300

# job -> (ranks, operations the hier run's work tables must have seen finish)
CASES = {
    "lightning_trainer": (2, {"allreduce", "broadcast"}),
    "lightning_fabric": (2, {"allreduce", "allgather", "broadcast", "barrier"}),
    "accelerate_job": (2, {"allreduce", "allgather", "barrier"}),
    "torchft_ddp": (2, {"allreduce"}),
    "dcp_reshard": (4, {"allgather", "broadcast"}),
    "dtensor_2d": (4, {"all_gather_into_tensor", "reduce_scatter_tensor", "allreduce"}),
    "pipelining": (2, {"send", "recv"}),
}

TIMES = {}  # job -> {backend: seconds}; conftest prints them


def run(job, backend, ranks, out):
    script = os.path.join(JOBS, f"{job}.py")
    if job == "torchft_ddp":  # starts its Lighthouse and replicas itself
        command = [sys.executable, script]
    else:
        # --standalone: torchrun binds its rendezvous port itself (no port picked here that another may take).
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", script]
    env = dict(os.environ, OMP_NUM_THREADS="1", UCX_WARN_UNUSED_ENV_VARS="n", PYTHONUNBUFFERED="1")
    start = time.monotonic()
    # A session of its own: a job past its time goes with all its processes (torchrun's ranks, replicas).
    job_process = subprocess.Popen(command + ["--backend", backend, "--out", str(out)], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = job_process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(job_process.pid, signal.SIGKILL)
        stdout, stderr = job_process.communicate()
        pytest.fail(f"{job} on {backend} did not finish in {TIMEOUT_S} s:\n{stdout[-6000:]}\n{stderr[-12000:]}")
    TIMES.setdefault(job, {})[backend] = time.monotonic() - start
    assert job_process.returncode == 0, (
        f"{job} on {backend} failed ({job_process.returncode}):\n{stdout[-6000:]}\n{stderr[-12000:]}")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(ranks)]


def same(a, b, where):
    """Asserts that two results are equal, bit for bit: tensors, and containers member by member."""
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype} {a.shape}, Gloo's {b.dtype} {b.shape}"
        assert torch.equal(a, b), f"{where}: differs from Gloo's (largest difference {(a - b).abs().max()})"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} against Gloo's {sorted(b)}"
        for key in a:
            same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: {len(a)} items against Gloo's {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} against Gloo's {b!r}"


@pytest.mark.parametrize("job", list(CASES))
def test_framework_matches_gloo(job, tmp_path):
    ranks, carried = CASES[job]
    hier = run(job, "hier", ranks, tmp_path / "hier")
    gloo = run(job, "gloo", ranks, tmp_path / "gloo")
    for rank, (h, g) in enumerate(zip(hier, gloo)):
        assert h.pop("backend") in ("hier", "torchft-hier") and g.pop("backend") in ("gloo", "torchft-gloo")
        missing = carried - set(h.pop("hier_ops"))
        assert not missing, f"{job} rank {rank}: hier's work table never saw {sorted(missing)}"
        g.pop("hier_ops")
        same(h, g, f"{job} rank {rank}")
    for results in (hier, gloo):
        for r in results:
            if job == "dcp_reshard":
                assert r["checks"] and all(r["checks"].values()), f"a loaded checkpoint differs: {r['checks']}"
            if job == "torchft_ddp":
                assert r["iterations"] == r["committed"], (
                    f"torchft lost {r['iterations'] - r['committed']} of {r['iterations']} steps")
