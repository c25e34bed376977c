"""Starts the ranks of a simulated host, round after round, for tests that start many short jobs
(test_peer_death.py). Run once per host (cluster.popen), it imports torch once and forks each round's ranks
from there: a rank then costs no torch import (3.5 s of CPU each on two cores, most of a round), and the
ranks of a host share its namespaces and its /dev/shm, as torchrun's children do.

stdin, one JSON line per round: {"module": name, "ranks": {rank: {environment}}, "timeout_s": s}. Each rank
is a fork that sets its environment and runs `<module>.main()`. stdout, one JSON line per round once every
rank has ended: {"ranks": {rank: [exit code, output]}, "shm": what the host's /dev/shm holds then}. A rank
still running after timeout_s is killed, and its output says so. The ranks have not imported hier (the
launcher never makes a group): each reads hier's settings at its first use, after its environment is set.
"""

import importlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback

import torch  # noqa: F401  (imported here once, for every rank forked below)
import torch.distributed  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def start(module, env):
    """Forks a rank; returns (pid, file that collects its stdout and stderr)."""
    output = tempfile.TemporaryFile()
    pid = os.fork()
    if pid != 0:
        return pid, output
    code = 1
    try:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        os.environ.update(env)
        importlib.import_module(module).main()
        code = 0
    except SystemExit as e:  # as the interpreter takes sys.exit(): None is 0, a message is printed and is 1
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main():
    for line in sys.stdin:
        round_ = json.loads(line)
        running = {}
        for rank, env in round_["ranks"].items():
            pid, output = start(round_["module"], env)
            running[pid] = (rank, output)
        deadline = time.monotonic() + round_["timeout_s"]
        ended, killed = {}, set()
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                if time.monotonic() > deadline:
                    for late in running:
                        os.kill(late, signal.SIGKILL)
                        killed.add(running[late][0])
                    deadline = float("inf")
                time.sleep(0.05)
                continue
            rank, output = running.pop(pid)
            output.seek(0)
            text = output.read().decode(errors="replace")
            if rank in killed:
                text += f"\n[launcher] killed: still running after {round_['timeout_s']} s"
            ended[rank] = [os.waitstatus_to_exitcode(status), text]
        print(json.dumps({"ranks": ended, "shm": sorted(os.listdir("/dev/shm"))}), flush=True)


if __name__ == "__main__":
    main()
