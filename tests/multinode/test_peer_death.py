"""Peer death, repeatedly: 2 simulated hosts x 2 ranks; in each round one rank (any of the four, the
store lives elsewhere) SIGKILLs itself at a random point: during the group's setup and first connections,
or inside a small collective, a large one or a point-to-point exchange (kill_job.py). The survivors must fail within the deadline, naming the dead rank, and exit cleanly, and
neither host's /dev/shm may hold anything once the round's ranks have ended. Each host's ranks are forked by
one launcher (launcher.py), so they share the host's /dev/shm and hier's shared memory between them is
in play when a peer dies. HIER_KILL_ROUNDS sets the number of rounds (50); docs/behaviour.md gives the
long run's command."""

import json
import os
import random
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cluster  # noqa: E402

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
ROUNDS = int(os.environ.get("HIER_KILL_ROUNDS", "50"))
TIMEOUT_S = 3
# The deadline, the second in which the failing ranks ask each other who arrived, and slack for a
# loaded two-core box running four ranks.
LIMIT_S = TIMEOUT_S + 2 + 3
STORE_PORT = 29500
reason = cluster.available()

STORE = f"""
import time, torch.distributed as dist
from datetime import timedelta
store = dist.TCPStore("0.0.0.0", {STORE_PORT}, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=60))
print("ready", flush=True)
time.sleep(3600)
"""


def _gone_ranks(text):
    """The ranks a failure says were gone (seen dead by this rank, or named so by another's notice), and
    so not waited for."""
    found = re.search(r"ranks? ([\d, ]+) gone \(", text)
    return {int(r) for r in found.group(1).split(",")} if found else set()


def _silent_ranks(text):
    """The ranks a failure says were silent or gone: gone, or no report at the collective (dead, or never
    there); for a survivor that learned of the failure from another's notice before its next operation, the
    rank whose connection that notice says was lost or could not be made, or the ranks not back at the
    meeting where the group would have gone on; for a setup that timed out, the rank it waited for; for a
    point-to-point operation, its peer, where it failed as a peer failure."""
    if gone := _gone_ranks(text):
        return gone
    found = (re.search(r"no report within \d+ ms from ranks? ([\d, ]+) \(", text)
             or re.search(r"ranks? ([\d, ]+) did not come back", text)
             or re.search(r"lost the connection to rank (\d+)", text)
             or re.search(r"rank (\d+)'s process ended", text)
             or re.search(r"waiting for rank (\d+)", text)
             or re.search(r"\(p2p seq \d+, rank \d+/\d+, peer (\d+), tag -?\d+\): peer failure", text)
             or re.search(r"cannot reach rank (\d+)", text))
    return {int(r) for r in found.group(1).split(",")} if found else set()


@pytest.mark.skipif(reason is not None, reason=reason or "")
def test_a_rank_killed_at_random_points_fails_the_survivors_in_time_every_time():
    rng = random.Random(1123)
    world, failures, durations, phases = 4, [], [], {}
    with cluster.Cluster(hosts=2) as c:
        store = c.popen(0, [sys.executable, "-c", STORE], stdout=subprocess.PIPE, text=True)
        assert store.stdout.readline().strip() == "ready"
        launchers = [c.popen(h, [sys.executable, LAUNCHER], env={"OMP_NUM_THREADS": "1"}, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for h in range(2)]
        for round_ in range(ROUNDS):
            victim = rng.randrange(world)
            env = dict(WORLD_SIZE=str(world), MASTER_ADDR=c.address(0), MASTER_PORT=str(STORE_PORT),
                       KILL_VICTIM=str(victim), KILL_SEED=str(round_), KILL_TIMEOUT_S=str(TIMEOUT_S))
            for h, launcher in enumerate(launchers):
                ranks = {r: dict(env, RANK=str(r)) for r in range(world) if r // 2 == h}
                launcher.stdin.write(json.dumps(dict(module="kill_job", ranks=ranks, timeout_s=120)) + "\n")
                launcher.stdin.flush()
            by_rank, where = {}, f"round {round_} (victim rank {victim})"
            for h, launcher in enumerate(launchers):
                line = launcher.stdout.readline()
                assert line, f"{where}: host {h}'s launcher exited with {launcher.wait()}"
                report = json.loads(line)
                by_rank.update((int(r), tuple(ended)) for r, ended in report["ranks"].items())
                if report["shm"]:
                    failures.append(f"{where}: host {h}'s /dev/shm holds {report['shm']} after the round")
            outputs = [by_rank[r] for r in range(world)]
            if outputs[victim][0] != -9:
                failures.append(f"{where}: the victim exited with {outputs[victim][0]}:\n{outputs[victim][1][-3000:]}")
            for r, (code, out) in enumerate(outputs):
                if r == victim:
                    continue
                lines = [line for line in out.splitlines() if line.startswith("{")]
                if code != 0 or not lines:
                    failures.append(f"{where}: survivor {r} exited with {code}:\n{out[-3000:]}")
                    continue
                result = json.loads(lines[-1])
                where = f"round {round_} (victim rank {victim}, {result['phase']})"
                phases[result["phase"]] = phases.get(result["phase"], 0) + 1
                problems = []
                # A victim killed during setup dies before, inside or just after its first operation.
                allowed = (-1, 0, 1) if result["phase"] == "setup" else (result["kill_at"], result["kill_at"] + 1)
                if result["failed_at"] not in allowed:
                    problems.append(f"failed at operation {result['failed_at']}, killed at {result['kill_at']}")
                else:
                    durations.append(result["took"])
                    if result["took"] > LIMIT_S:
                        problems.append(f"failed after {result['took']:.1f} s (limit {LIMIT_S} s)")
                    named = _silent_ranks(result["error"])
                    # Point-to-point has no notices: a request to another survivor that gave up and closed
                    # first can fail first, naming that survivor.
                    if (victim not in named) if result["phase"] != "p2p" else not named:
                        problems.append("the error does not name the dead rank")
                    # Told by a rank that saw the victim end: the notice names it, and this rank does not
                    # wait for the victim's report either.
                    told = re.search(r"the group failed: .* failed on rank \d+: (lost the connection to|cannot "
                                     r"reach) rank (\d+)", result["error"])
                    if told and int(told.group(2)) == victim and victim not in _gone_ranks(result["error"]):
                        problems.append("a notice named the dead rank, but this rank waited for its report")
                if problems:
                    failures.append(f"{where}: survivor {r}: {'; '.join(problems)}: {result['error']}")
        for launcher in launchers:
            launcher.stdin.close()
            launcher.wait(timeout=30)
        store.kill()
    assert not failures, "\n\n".join(failures)
    assert len(durations) >= 3 * ROUNDS, durations
    durations.sort()
    print(f"{ROUNDS} rounds, survivors by phase {phases}: failed in {durations[0]:.2f} to {durations[-1]:.2f} s, "
          f"median {durations[len(durations) // 2]:.2f} s; {sum(d < 1 for d in durations)} of {len(durations)} "
          "within 1 s")


CONNECTED_THEN_KILLED = """
import os, signal, sys, time, torch, torch.distributed as dist
from datetime import timedelta
rank, op, late = int(os.environ["RANK"]), os.environ["OP"], os.environ["LATE"] == "1"
store = dist.PrefixStore(f"{{op}}{{late}}/", dist.TCPStore(os.environ["MASTER_ADDR"], {port}, is_master=False,
                                                       timeout=timedelta(seconds=60)))
if rank == 0 and late:
    # Not yet there when rank 1 posts its receive from it: rank 1 learns where it is only when it sends.
    time.sleep(2)
dist.init_process_group("hier", store=store, rank=rank, world_size=2, timeout=timedelta(seconds={timeout}))
if rank == 0:
    # Alive while rank 1 connects to it; killed once rank 1's operation is under way.
    store.wait(["started"])
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)
t = torch.ones(1024)
began = time.monotonic()
try:
    work = (dist.all_reduce(t, async_op=True) if op == "allreduce"
            else dist.all_to_all_single(torch.empty(1024), t, async_op=True))
    store.set("started", "1")
    work.wait()
    print("no error", flush=True)
except dist.DistBackendError as e:
    print(f"took {{time.monotonic() - began:.2f}}: {{str(e).splitlines()[0]}}", flush=True)
"""


@pytest.mark.skipif(reason is not None, reason=reason or "")
@pytest.mark.parametrize("late", [False, True], ids=["victim_ready", "victim_late"])
@pytest.mark.parametrize("op", ["allreduce", "alltoall"])
def test_a_peer_on_another_host_killed_after_the_first_connection_fails_every_pending_request_at_once(op, late):
    """The survivor's first operation posts its receive from the victim before its first send connects to
    the victim; with `late`, before the victim has even said where it can be reached. When the victim dies,
    UCX fails that connection, and the receive must fail with it, long before the deadline (60 s): it used
    to wait for it, as no endpoint watched the peer for it."""
    timeout_s = 60
    with cluster.Cluster(hosts=2) as c:
        store = c.popen(0, [sys.executable, "-c", STORE], stdout=subprocess.PIPE, text=True)
        assert store.stdout.readline().strip() == "ready"
        script = CONNECTED_THEN_KILLED.format(port=STORE_PORT, timeout=timeout_s)
        ranks = [c.popen(r, [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=dict(RANK=str(r), OP=op, LATE=str(int(late)), MASTER_ADDR=c.address(0)))
                 for r in range(2)]
        victim, _ = ranks[0].communicate(timeout=120)
        survivor, _ = ranks[1].communicate(timeout=120)
        store.kill()
    assert ranks[0].returncode == -9, victim[-3000:]
    assert ranks[1].returncode == 0, survivor[-3000:]
    found = re.search(r"^took ([\d.]+): (.*)$", survivor, re.MULTILINE)
    assert found, survivor[-3000:]
    took, error = float(found.group(1)), found.group(2)
    assert took < 10, f"failed only after {took} s (deadline {timeout_s} s); the survivor said:\n{survivor[-6000:]}"
    assert 0 in _silent_ranks(error), error



@pytest.mark.skipif(reason is not None, reason=reason or "")
def test_a_rank_waiting_in_shared_memory_hears_a_failure_notice_before_its_deadline():
    """Inside a 64 MiB split-rail allreduce on 2 hosts x 2 ranks (notice_job.py), rank 1 stops (alive, for
    8 s) and rank 3 dies. Rank 0 waits in shared memory for rank 1 and has no request on rank 3 in flight,
    so only a notice can end its wait before rank 1 resumes (the deadline is 60 s). Rank 2 sends one when
    it finds rank 3 dead, which it does at once where it was waiting for rank 3 in shared memory then, not
    where it was waiting for rank 0 over the network (an attempt that says nothing: up to 4 are made).
    Rank 0 must fail within a few ticks of rank 2, told by rank 2."""
    stop_s, attempts = 8, 4
    with cluster.Cluster(hosts=2) as c:
        store = c.popen(0, [sys.executable, "-c", STORE], stdout=subprocess.PIPE, text=True)
        assert store.stdout.readline().strip() == "ready"
        launchers = [c.popen(h, [sys.executable, LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True) for h in range(2)]
        for attempt in range(attempts):
            env = dict(MASTER_ADDR=c.address(0), MASTER_PORT=str(STORE_PORT), STOP_S=str(stop_s), TIMEOUT_S="60",
                       ATTEMPT=str(attempt), OMP_NUM_THREADS="1", HIER_ALGORITHMS="allreduce=split_rail")
            for h, launcher in enumerate(launchers):
                ranks = {r: dict(env, RANK=str(r)) for r in range(4) if r // 2 == h}
                launcher.stdin.write(json.dumps(dict(module="notice_job", ranks=ranks, timeout_s=120)) + "\n")
                launcher.stdin.flush()
            by_rank = {}
            for launcher in launchers:
                by_rank.update((int(r), ended) for r, ended in json.loads(launcher.stdout.readline())["ranks"].items())
            assert by_rank[3][0] == -9, by_rank[3][1][-3000:]
            results = {}
            for r in range(3):
                code, out = by_rank[r]
                lines = [line for line in out.splitlines() if line.startswith("{")]
                assert code == 0 and lines, f"rank {r} exited with {code}:\n{out[-3000:]}"
                results[r] = json.loads(lines[-1])
                assert results[r]["error"] is not None, f"rank {r}'s allreduce succeeded without rank 3"
            if results[2]["took"] < stop_s and "rank 3's process ended" in results[2]["error"].split("; ")[0]:
                break
        else:
            pytest.fail(f"in {attempts} attempts rank 2 never found rank 3 dead before rank 1 resumed: {results}")
        for launcher in launchers:
            launcher.stdin.close()
            launcher.wait(timeout=30)
        store.kill()
    took, error = results[0]["took"], results[0]["error"]
    assert took < min(4, results[2]["took"] + 1.5), (
        f"rank 0 failed only after {took:.1f} s, rank 2 at {results[2]['took']:.1f} s (rank 1 resumed at "
        f"{stop_s} s): {error}")
    assert re.search(r"failed on rank 2: rank 3's process ended", error), error


RECEIVE_ONLY = """
import os, signal, time, torch, torch.distributed as dist
from datetime import timedelta
rank = int(os.environ["RANK"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], {port}, is_master=False, timeout=timedelta(seconds=60))
dist.init_process_group("hier", store=store, rank=rank, world_size=2, timeout=timedelta(seconds={timeout}))
t = torch.ones(1024)
dist.send(t, 1) if rank == 0 else dist.recv(t, 0)  # rank 1 never sends to rank 0
if rank == 0:
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGKILL)
began = time.monotonic()
try:
    dist.recv(t, 0)
    print("no error", flush=True)
except dist.DistBackendError as e:
    print(f"took {{time.monotonic() - began:.2f}}: {{str(e).splitlines()[0]}}", flush=True)
"""


@pytest.mark.skipif(reason is not None, reason=reason or "")
def test_a_receive_from_a_peer_on_another_host_that_dies_fails_at_once():
    """Rank 1 only ever receives from rank 0, on another host; rank 0 dies while rank 1 waits for it. The
    receive must fail when the connection breaks, not at the deadline (it did, as rank 1 had no connection
    of its own to rank 0 for UCX to watch)."""
    timeout_s = 30
    with cluster.Cluster(hosts=2) as c:
        store = c.popen(0, [sys.executable, "-c", STORE], stdout=subprocess.PIPE, text=True)
        assert store.stdout.readline().strip() == "ready"
        script = RECEIVE_ONLY.format(port=STORE_PORT, timeout=timeout_s)
        ranks = [c.popen(r, [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=dict(RANK=str(r), MASTER_ADDR=c.address(0))) for r in range(2)]
        victim, _ = ranks[0].communicate(timeout=120)
        survivor, _ = ranks[1].communicate(timeout=120)
        store.kill()
    assert ranks[0].returncode == -9, victim[-3000:]
    assert ranks[1].returncode == 0, survivor[-3000:]
    found = re.search(r"^took ([\d.]+): (.*)$", survivor, re.MULTILINE)
    assert found, survivor[-3000:]
    took, error = float(found.group(1)), found.group(2)
    assert took < 5, f"failed only after {took} s (deadline {timeout_s} s): {error}"
    assert "peer 0" in error and "peer failure" in error, error
