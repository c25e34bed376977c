"""Real multi-process torch.distributed jobs for the tests.

``RankPool`` starts ``world_size`` fresh processes that join one process group and then run test functions
on request, all ranks at once, returning each rank's result. A function that fails on any rank fails the
call with every rank's traceback; a call that does not finish in time kills the pool (the next call starts
a new one), so a hang becomes a failure, never a stuck test run. A pool serves many tests.

The ranks fork from multiprocessing's fork server, which has imported torch and nothing else: a spawned
interpreter would import torch again in every rank, 3.5 s of CPU each on two cores. A rank still starts
clean: no group, no UCX or CUDA context, and hier reads its settings from the environment at first use,
after the rank's own environment is set.

Functions run in the ranks must be importable module-level functions: they travel by name.
"""

import datetime
import multiprocessing
from multiprocessing import reduction
import os
import queue
import random
import socket
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

_CALL_TIMEOUT_S = float(os.environ.get("HIER_TEST_CALL_TIMEOUT", "180"))

# The torch release running the tests, (major, minor): hier builds against 2.11 to 2.15, and a few torch
# features the tests use came within that range.
TORCH_RELEASE = tuple(int(x) for x in torch.__version__.split("+", 1)[0].split(".")[:2])


_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["torch", "torch.distributed"])


class _TestOutput:
    """The test process's stdout and stderr as they are when a rank starts, for the rank to write to. A
    spawned process inherits them; a forked one has the fork server's, which point wherever they pointed
    when the server started (pytest's capture of some earlier test). Pickled as the rank starts, which
    hands the two descriptors over (multiprocessing's DupFd)."""

    def __reduce__(self):
        return (_write_to, (reduction.DupFd(1), reduction.DupFd(2)))


def _write_to(stdout, stderr):
    for fd, dup in ((1, stdout), (2, stderr)):
        received = dup.detach()
        os.dup2(received, fd)
        os.close(received)


def _rank_main(rank, world_size, backend, init_method, timeout_s, env, tasks, results, _output):
    # `_output` is None: a _TestOutput, which took the test's stdout and stderr over as it arrived.
    os.environ.update(env)
    # torch.distributed read TORCH_DISTRIBUTED_DEBUG when this module imported it, before `env` came.
    dist.set_debug_level_from_env()
    # One intra-op thread per rank, as torchrun gives ranks that share a host: the ranks' reference
    # computations would otherwise each start an OpenMP team as wide as the machine, whose spinning
    # threads take the cores from the collectives (4 ranks on 2 cores: a test case 3x slower).
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        kwargs = dict(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
        if init_method == "env://":
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        else:
            kwargs.update(rank=rank, world_size=world_size)
        dist.init_process_group(init_method=init_method, **kwargs)
        results.put((rank, "ready", None))
    except Exception:
        results.put((rank, "error", traceback.format_exc()))
        return
    while True:
        task = tasks.get()
        if task is None:
            break
        fn, args = task
        try:
            results.put((rank, "ok", fn(*args)))
        except BaseException:
            results.put((rank, "error", traceback.format_exc()))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


class RankFailure(AssertionError):
    pass


def free_port():
    """A free port for a rendezvous server, below the kernel's ephemeral range. A port the kernel hands out
    (bind to port 0) can be taken again, as the local port of any outgoing connection, before the server
    listens on it: CI saw that once, as EADDRINUSE. Ports below the range are only ever taken by a bind."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low = min(10000, ephemeral_low // 2)
    for port in random.sample(range(low, ephemeral_low), 200):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {low} and {ephemeral_low}")


class RankPool:
    """``init`` is "file" (default), "tcp" or "env" (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, as torchrun
    sets them). ``env`` is a dict for every rank, or a function of the rank returning one. Ranks in
    ``may_exit`` may die (tests of peer failure): their result is "exited"."""

    def __init__(self, world_size, backend="hier", timeout_s=60, env=None, init="file", may_exit=()):
        self.world_size = world_size
        self.backend = backend
        self.may_exit = set(may_exit)
        self._dir = tempfile.TemporaryDirectory(prefix="hier-pool-")
        self._results = _CONTEXT.Queue()
        self._tasks = [_CONTEXT.Queue() for _ in range(world_size)]
        env_of = env if callable(env) else (lambda rank, fixed=dict(env or {}): fixed)
        env = {}
        if init == "file":
            init_method = "file://" + os.path.join(self._dir.name, "init")
        elif init == "tcp":
            init_method = f"tcp://127.0.0.1:{free_port()}"
        else:
            init_method = "env://"
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        self._procs = [
            _CONTEXT.Process(
                target=_rank_main,
                args=(r, world_size, backend, init_method, timeout_s, {**env, **env_of(r)}, self._tasks[r], self._results,
                      _TestOutput()),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in self._procs:
            p.start()
        self.broken = False
        self._collect("ready")

    def _collect(self, expected_state):
        by_rank = {}
        errors = []
        deadline = time.monotonic() + _CALL_TIMEOUT_S
        while len(by_rank) < self.world_size:
            try:
                rank, state, value = self._results.get(timeout=1.0)
            except queue.Empty:
                for r, p in enumerate(self._procs):
                    if r in by_rank or p.is_alive():
                        continue
                    if r in self.may_exit:
                        by_rank[r] = "exited"
                    else:
                        by_rank[r] = None
                        errors.append(f"\n--- rank {r} ---\ndied with exit code {p.exitcode}")
                if time.monotonic() > deadline:
                    self.close(kill=True)
                    missing = sorted(set(range(self.world_size)) - set(by_rank))
                    raise RankFailure(
                        f"ranks {missing} did not finish within {_CALL_TIMEOUT_S} s" + "".join(errors)
                    ) from None
                continue
            if state == "error":
                errors.append(f"\n--- rank {rank} ---\n{value}")
                by_rank[rank] = None
            else:
                by_rank[rank] = value
        if errors:
            # One rank failing may leave others stuck in a later collective: start afresh next time.
            self.close(kill=True)
            raise RankFailure("".join(errors))
        return [by_rank[r] for r in range(self.world_size)]

    def run(self, fn, *args):
        """Runs ``fn(*args)`` on every rank; returns the list of results, by rank."""
        if self.broken:
            raise RuntimeError("this pool was closed")
        for q in self._tasks:
            q.put((fn, args))
        return self._collect("ok")

    def close(self, kill=False):
        if self.broken:
            return
        self.broken = True
        if not kill:
            for q in self._tasks:
                q.put(None)
            for p in self._procs:
                p.join(timeout=30)
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join()
        self._dir.cleanup()


def run_job(world_size, fn, *args, backend="hier", timeout_s=60, env=None, init="file", may_exit=()):
    """A one-off job: a fresh pool for ``fn``, closed afterwards (for tests that break their group)."""
    pool = RankPool(world_size, backend=backend, timeout_s=timeout_s, env=env, init=init, may_exit=may_exit)
    try:
        return pool.run(fn, *args)
    finally:
        pool.close(kill=True)
