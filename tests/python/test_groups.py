"""Groups: subsets in any order, several at once, and clean teardown (no thread left, no UCX noise)."""

import os
import subprocess
import sys
import textwrap
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
