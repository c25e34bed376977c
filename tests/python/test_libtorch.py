"""hier from a LibTorch program with no Python in it: tests/libtorch/named_groups.cpp, built with the plugin.

It creates named groups through a TCPStore, runs torch's functional collectives on them by name and the
ProcessGroup API on the groups the registry resolves, checks every result against its own local
computation, and destroys them; here it runs as 3 processes and as 3 threads of one process. Built
against torch 2.15 or later it also checks the keyed completion hooks, which only C++ reaches.
"""

import os
import subprocess

from harness import TORCH_RELEASE, free_port

BUILD = os.environ.get("HIER_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PROGRAM = os.path.join(BUILD, "tests", "named_groups")


def _check(outputs, size):
    hooks = "; completion hooks" if TORCH_RELEASE >= (2, 15) else ""
    for r in range(size):
        assert any(line.startswith(f"rank {r}: ok") and hooks in line for line in outputs.splitlines()), outputs


def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith("UCX_") or k == "UCX_WARN_UNUSED_ENV_VARS"}


def test_named_groups_from_cpp_processes():
    assert os.path.exists(PROGRAM), f"{PROGRAM} is not built: run packaging/install.sh (or set HIER_BUILD_DIR)"
    size, port = 3, free_port()
    ranks = [subprocess.Popen([PROGRAM, "processes", str(r), str(size), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env()) for r in range(size)]
    outputs = [rank.communicate(timeout=180) for rank in ranks]
    for r, (rank, (out, err)) in enumerate(zip(ranks, outputs)):
        assert rank.returncode == 0, f"rank {r} exited with {rank.returncode}:\n{out}\n{err}"
    _check("".join(out for out, _ in outputs), size)


def test_named_groups_from_cpp_threads():
    assert os.path.exists(PROGRAM), f"{PROGRAM} is not built: run packaging/install.sh (or set HIER_BUILD_DIR)"
    size = 3
    result = subprocess.run([PROGRAM, "threads", str(size)], capture_output=True, text=True, timeout=180, env=_env())
    assert result.returncode == 0, f"exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    _check(result.stdout, size)


def test_the_process_group_benchmark_runs_every_operation():
    # Not a speed check (speed lives in the benchmarks' output): the C++ benchmark beside torch_hier.bench
    # builds, forks its ranks, and times every operation it lists without failing.
    program = os.path.join(BUILD, "tests", "process_group_bench")
    assert os.path.exists(program), f"{program} is not built: run packaging/install.sh (or set HIER_BUILD_DIR)"
    result = subprocess.run([program, "3", "16K"], capture_output=True, text=True, timeout=180, env=_env())
    assert result.returncode == 0, f"exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    timed = {}
    for line in result.stdout.splitlines():
        op, nbytes, _, us = line.split()[:4]
        timed[(op, int(nbytes))] = float(us)
    ops = ["allreduce", "allreduce_async", "allreduce_async8", "allgather", "reduce_scatter", "alltoall", "broadcast",
           "reduce", "gather", "scatter", "sendrecv"]
    assert set(timed) == {(op, n) for op in ops for n in (1024, 4096, 16384)} | {("barrier", 0)}, result.stdout
    assert all(us > 0 for us in timed.values()), result.stdout
