"""Each hier group's work table: what it holds, what shutdown warns about, what a timeout writes out."""

import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

import torch_hier
from harness import run_job

HISTORY = 32  # registry::WorkTable::kHistory


def _rows(table, **match):
    return [r for r in table if all(r[k] == v for k, v in match.items())]


def case_no_flight_recorder_hook_on_hier_groups():
    # hier's groups record their own operations (this table), so torch (2.15 on) attaches no
    # FlightRecorderHook to them, as to Gloo's, which record into torch's recorder themselves.
    c10d = dist.distributed_c10d
    self_recording = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if self_recording is None:
        return "this torch attaches no flight-recorder hooks"
    hooks = c10d._world.pg_flight_recorder_hooks
    group = dist.new_group(backend="hier")
    dist.all_reduce(torch.ones(4), group=group)
    assert _rows(json.loads(torch_hier.work_table(group, "json"))["history"], op="allreduce")
    assert dist.group.WORLD not in hooks and group not in hooks, hooks
    # Were hier not declared self-recording, its groups would get one.
    self_recording.discard("hier")
    try:
        hooked = dist.new_group(backend="hier")
    finally:
        self_recording.add("hier")
    assert hooked in hooks, "torch attaches no hook to a hier group either way: this test tells nothing"
    return "no hook"


def test_torch_attaches_no_flight_recorder_hook_to_hier_groups(pools):
    results = pools(2).run(case_no_flight_recorder_hook_on_hier_groups)
    assert len(set(results)) == 1, results


def case_table_contents():
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(world)))  # a fresh group: a table of its own
    before = json.loads(torch_hier.work_table(group, "json"))
    assert before["collectives_issued"] == 0 and before["live"] == [] and before["history"] == []

    dist.all_reduce(torch.ones(3, 4), group=group)
    dist.broadcast(torch.ones(5, dtype=torch.int64), src=world - 1, group=group)
    dist.all_gather_into_tensor(torch.empty(world * 6, dtype=torch.bfloat16), torch.ones(6, dtype=torch.bfloat16),
                                group=group)
    pending = dist.all_reduce(torch.ones(7), async_op=True, group=group)  # not waited for yet
    if world > 1:
        peer = 1 - rank if rank < 2 else None
        if peer is not None:
            if rank == 0:
                dist.send(torch.ones(2), peer, group=group)
            else:
                dist.recv(torch.empty(2), peer, group=group)
    dist.barrier(group=group)
    pending.get_future().wait()  # finished, but the Work itself not waited for: the future counts
    table = json.loads(torch_hier.work_table(group, "json"))
    assert table["group"] == group.group_name and table["rank"] == rank and table["size"] == world
    history = table["history"]
    (row,) = _rows(history, op="allreduce", seq=0)
    assert row["dtype"] == "float32" and row["inputs"] == [[3, 4]] and row["outputs"] == [[3, 4]], row
    assert row["state"] == "succeeded" and row["waited"] and row["peers"] == "all" and row["duration_ms"] >= 0, row
    (row,) = _rows(history, op="broadcast")
    assert row["dtype"] == "int64" and row["peers"] == f"root {world - 1}", row
    (row,) = _rows(history, op="all_gather_into_tensor")
    assert row["dtype"] == "bfloat16" and row["inputs"] == [[6]] and row["outputs"] == [[world * 6]], row
    assert _rows(history, op="allreduce", seq=3), history
    if world > 1 and rank < 2:
        (row,) = _rows(history, kind="p2p")
        assert row["op"] == ("send" if rank == 0 else "recv") and row["peers"] == f"peer {1 - rank}", row
    assert table["live"] == [], table["live"]

    # Works not waited for stay listed, as such, until they are.
    works = [dist.all_reduce(torch.ones(1), async_op=True, group=group) for _ in range(3)]
    time.sleep(0.2)
    dist.barrier(group=group)
    live = json.loads(torch_hier.work_table(group, "json"))["live"]
    assert [r["waited"] for r in live] == [False] * 3 and {r["state"] for r in live} == {"succeeded"}, live
    text = torch_hier.work_table(group)
    assert "3 finished but never waited for" in text, text
    for w in works:
        w.wait()
    assert json.loads(torch_hier.work_table(group, "json"))["live"] == []

    # However long the job, the history keeps the last few.
    for _ in range(HISTORY + 10):
        dist.all_reduce(torch.ones(1), group=group)
    table = json.loads(torch_hier.work_table(group, "json"))
    assert len(table["history"]) == HISTORY and table["history"][-1]["seq"] == table["collectives_issued"] - 1

    # The rows that leave the history are reused: a reused row describes its new operation alone, and
    # the history stays in issue order.
    dist.broadcast(torch.ones(2, 5, dtype=torch.int64), src=world - 1, group=group)
    dist.all_reduce(torch.ones(3), group=group)
    dist.all_gather_into_tensor(torch.empty(world * 2), torch.ones(2), group=group)
    table = json.loads(torch_hier.work_table(group, "json"))
    issued = table["collectives_issued"]
    assert [r["seq"] for r in table["history"]] == list(range(issued - HISTORY, issued)), table["history"]
    b, a, g = table["history"][-3:]
    assert (b["op"], b["dtype"], b["inputs"], b["peers"]) == ("broadcast", "int64", [[2, 5]], f"root {world - 1}"), b
    assert (a["op"], a["dtype"], a["inputs"], a["peers"], a["error"]) == ("allreduce", "float32", [[3]], "all", None), a
    assert (g["op"], g["inputs"], g["outputs"], g["state"]) == ("all_gather_into_tensor", [[2]], [[world * 2]],
                                                                 "succeeded"), g
    dist.destroy_process_group(group)
    return True


def test_work_table_contents(pools):
    assert all(pools(1).run(case_table_contents))
    assert all(pools(3).run(case_table_contents))


# ---- shutdown ------------------------------------------------------------------------------------------


def unwaited_job():
    """torchrun target: leaves two operations unwaited, then shuts the group down."""
    dist.init_process_group("hier")
    dist.all_reduce(torch.ones(4))
    forgotten = dist.all_reduce(torch.ones(8), async_op=True)  # noqa: F841 - never waited for
    forgotten_too = dist.broadcast(torch.ones(2), src=0, async_op=True)  # noqa: F841
    dist.barrier()
    dist.destroy_process_group()


def test_shutdown_warns_about_works_nobody_waited_for():
    here = os.path.dirname(__file__)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "test_work_table"],
        cwd=here, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": here})
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = [line for line in result.stderr.splitlines() if "nobody waited for" in line]
    assert len(warnings) == 2, result.stderr  # one per rank
    for line in warnings:
        assert "2 operation(s) nobody waited for: seq 1 allreduce (succeeded); seq 2 broadcast (succeeded)" in line, line
        assert "seq 0 " not in line and "seq 3 " not in line, line  # waited for: not listed


# ---- timeouts ------------------------------------------------------------------------------------------

TIMEOUT_S = 3


def case_timeout_dump():
    """Rank 2 never comes to seq 2: ranks 0 and 1 time out, and each writes its table and the reports."""
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(10))
    dist.all_reduce(torch.ones(10))
    if rank == 2:
        time.sleep(TIMEOUT_S + 4)
        return None
    try:
        dist.all_reduce(torch.ones(10))
    except dist.DistBackendError as e:
        return str(e).split("\nException raised from")[0]
    raise AssertionError("the allreduce succeeded without rank 2")


def test_a_timeout_writes_the_work_table_out():
    with tempfile.TemporaryDirectory(prefix="hier-dumps-") as dumps:
        results = run_job(3, case_timeout_dump, timeout_s=TIMEOUT_S, env={"HIER_DUMP_DIR": dumps})
        for rank in (0, 1):
            message = results[rank]
            (base,) = glob.glob(os.path.join(dumps, f"*.rank{rank}.seq2.pid*.json"))
            base = base[: -len(".json")]
            assert f"work table and the others' reports are in {base}.txt" in message, message
            text = open(base + ".txt").read()
            dump = json.loads(open(base + ".json").read())
            assert dump["rank"] == rank and dump["failed_seq"] == 2 and dump["silent"] == [2], dump
            (row,) = _rows(dump["live"], seq=2)
            assert row["op"] == "allreduce" and row["state"] == "running" and row["inputs"] == [[10]], row
            assert [r["seq"] for r in dump["history"]] == [0, 1], dump["history"]
            # Both failing ranks reported where they were; each dump holds both reports.
            assert set(dump["reports"]) == {"0", "1"}, dump["reports"]
            for r in ("0", "1"):
                assert dump["reports"][r].startswith(f"rank {r}: last issued seq 2 allreduce float32 [10], running")
            assert "rank 2: no report" in text and "seq 2" in text and "allreduce" in text, text


# ---- Work objects from many threads --------------------------------------------------------------------


def case_work_from_many_threads():
    """wait() from several threads at once, again and again; a failed work raises every time."""
    world = dist.get_world_size()
    t = torch.ones(1 << 16)
    work = dist.all_reduce(t, async_op=True)
    outcomes = []

    def waiter():
        for _ in range(3):
            outcomes.append(work.wait())

    threads = [threading.Thread(target=waiter) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert outcomes == [True] * 18 and torch.all(t == world)
    assert work.is_completed() and work.is_success()
    return True


def test_work_is_thread_safe_and_idempotent(pools):
    assert all(pools(2).run(case_work_from_many_threads))


if __name__ == "__main__":
    unwaited_job()
