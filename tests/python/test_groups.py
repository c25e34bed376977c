"""Groups: subsets in any order, several at once, and clean teardown (no thread left, no UCX noise)."""

import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from harness import free_port, run_job


def _hier_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    return sorted(n for n in names if n.startswith("hier"))


def case_subgroups():
    rank, world = dist.get_rank(), dist.get_world_size()
    odd_first = dist.new_group([3, 1])  # any order; ranks 1 and 3 only
    evens = dist.new_group([0, 2])
    everyone_reversed = dist.new_group(list(reversed(range(world))))
    mine = odd_first if rank % 2 else evens
    t = torch.full((100,), float(rank))
    dist.all_reduce(t, group=mine)
    assert torch.all(t == (4.0 if rank % 2 else 2.0)), t[0]
    # Broadcast from a global rank inside a subgroup.
    b = torch.full((5,), float(rank))
    dist.broadcast(b, src=3 if rank % 2 else 2, group=mine)
    assert torch.all(b == (3.0 if rank % 2 else 2.0))
    # Two groups in flight at once on every rank.
    a, c = torch.ones(1000), torch.full((1000,), float(rank))
    w1 = dist.all_reduce(a, group=everyone_reversed, async_op=True)
    w2 = dist.all_reduce(c, group=mine, async_op=True)
    w2.wait()
    w1.wait()
    assert torch.all(a == world) and torch.all(c == (4.0 if rank % 2 else 2.0))
    for g in (odd_first, evens, everyone_reversed):
        dist.destroy_process_group(g)
    # A group made after others were destroyed works (fresh group id, same endpoints).
    again = dist.new_group([0, 1, 2, 3])
    t = torch.ones(7)
    dist.all_reduce(t, group=again)
    assert torch.all(t == 4)
    dist.destroy_process_group(again)


def test_subgroups_in_any_order_and_concurrently(pools):
    pools(4).run(case_subgroups)


def case_merge_remote_group(port):
    """Every rank merges its half (evens, odds) into one group of all, on a TCPStore made for the merge."""
    rank, world = dist.get_rank(), dist.get_world_size()
    halves = [dist.new_group(list(range(parity, world, 2))) for parity in (0, 1)]
    mine = halves[rank % 2]
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=60))
    # torch numbers the members in the order they reach the store (its "mergeGroupRank" count): here in
    # rank order, so that the merged group's ranks are the default group's.
    while store.add("mergeGroupRank", 0) != rank:
        time.sleep(0.005)
    merged = mine.merge_remote_group(store, world, timeout=timedelta(seconds=60), group_name="merged")
    assert merged.size() == world and merged.rank() == rank
    assert merged._get_backend(torch.device("cpu")).group_name == "merged"
    order = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    merged.allgather([order], [torch.tensor([rank])]).wait()
    assert [int(t) for t in order] == list(range(world))
    # The new store counts group ids from 1 again: the merged group must not take an id this job's groups
    # hold (the default group's is 1), or their messages would match each other's. Same ranks, same tag:
    # rank 1 receives on the merged group first, and must get the merged group's message, not the one the
    # default group's send put before it.
    if rank == 0:
        sends = [dist.isend(torch.full((4,), 1.0), dst=1, tag=5), merged.send([torch.full((4,), 2.0)], 1, 5)]
        for send in sends:
            send.wait()
    elif rank == 1:
        on_merged, on_world = torch.zeros(4), torch.zeros(4)
        merged.recv([on_merged], 0, 5).wait()
        dist.recv(on_world, src=0, tag=5)
        assert torch.all(on_merged == 2) and torch.all(on_world == 1), (on_merged, on_world)
    me = merged.rank()
    # Collectives of both groups in flight at once, several times.
    for step in range(3):
        a, b = torch.full((1000,), float(rank + step)), torch.full((1000,), float(me * 10))
        on_world = dist.all_reduce(a, async_op=True)
        on_merged = merged.allreduce([b])
        on_merged.wait()
        on_world.wait()
        assert torch.all(a == sum(range(world)) + world * step) and torch.all(b == 10 * sum(range(world)))
    # The halves go on working.
    h = torch.ones(3)
    dist.all_reduce(h, group=mine)
    assert torch.all(h == len(range(rank % 2, world, 2)))
    merged.shutdown()
    for half in halves:
        dist.destroy_process_group(half)


def test_merge_remote_group_joins_halves_into_one_group(pools):
    for world in (3, 4):
        pools(world).run(case_merge_remote_group, free_port())


def case_teardown_leaves_no_thread():
    t = torch.ones(1 << 16)
    dist.all_reduce(t, async_op=True).wait()
    if dist.get_world_size() > 1:
        if dist.get_rank() == 0:
            dist.send(t, 1)
        elif dist.get_rank() == 1:
            dist.recv(t, 0)
    assert _hier_threads(), "expected hier's threads while the group is alive"
    dist.destroy_process_group()
    assert _hier_threads() == [], f"threads left after destroy_process_group: {_hier_threads()}"
    # Init again in the same process: everything comes back.
    return "ok"


def test_destroy_process_group_stops_every_thread():
    assert run_job(2, case_teardown_leaves_no_thread) == ["ok", "ok"]


def test_a_torchrun_job_exits_cleanly_and_quietly(tmp_path):
    """A real torchrun job (env:// init): exit code 0, no UCX warnings, no leftover messages."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, torch.distributed as dist
        dist.init_process_group("hier")
        t = torch.ones(1 << 20)
        for _ in range(5):
            dist.all_reduce(t)
        g = dist.new_group([0, 2])
        if dist.get_rank() in (0, 2):
            dist.all_reduce(torch.ones(3), group=g)
        dist.barrier()
        # one write per line: several ranks share the pipe, and print() writes in pieces
        sys.stdout.write(f"rank {dist.get_rank()} sum {t[0].item()}\\n")
        sys.stdout.flush()
        dist.destroy_process_group()
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCX_")}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--master-port", str(free_port()),
         str(script)],
        capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("sum 243.0") == 3, result.stdout
    noisy = [line for line in result.stderr.splitlines() if "UCX" in line or "[hier" in line]
    assert not noisy, "unexpected messages:\n" + "\n".join(noisy)


def case_options_reach_every_group(path):
    import torch_hier

    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    options = torch_hier.ProcessGroupHier.Options(timeout=timedelta(seconds=40), is_high_priority_stream=True)
    dist.init_process_group("hier", init_method=f"file://{path}", rank=rank, world_size=world, pg_options=options,
                            device_id=torch.device("cpu", 0))

    def priority(group):
        return group._get_backend(torch.device("cpu")).options.is_high_priority_stream

    world_options = dist.group.WORLD._get_backend(torch.device("cpu")).options
    seen = [(world_options.is_high_priority_stream, world_options._timeout)]
    # A group split from its parent (dist.split_group) keeps the parent's stream priority; new_group takes
    # the options it is given, or the defaults (as ProcessGroupNCCL's).
    split = dist.split_group(split_ranks=[[0, 1], [2]])
    own = dist.new_group([0, 1], pg_options=torch_hier.ProcessGroupHier.Options(is_high_priority_stream=True))
    plain = dist.new_group([0, 1])
    for group in (split, own, plain):
        if rank in (0, 1):
            seen.append(priority(group))
            t = torch.ones(3)
            dist.all_reduce(t, group=group)
            assert torch.all(t == 2)
    dist.destroy_process_group()
    return seen


def test_options_reach_the_group_and_those_split_from_it(tmp_path):
    results = run_job(3, case_options_reach_every_group, str(tmp_path / "store"), timeout_s=20)
    expected = (True, timedelta(seconds=40))
    assert results[2] == [expected], results
    assert results[0] == results[1] == [expected, True, True, False], results
