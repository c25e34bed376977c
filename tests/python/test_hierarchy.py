"""The collectives on layered groups: ranks on simulated hosts (HIER_HOST_ID per rank) take the
hierarchical schedules, and must give what reference.py computes, for every dtype and reduce op, exactly
as the flat groups of test_collectives.py do."""

import pytest

import test_collectives as cases

# 2 hosts x 2 ranks; one rank per host; an uneven 2 + 1; two hosts with interleaved ranks.
LAYOUTS = ["AABB", "ABCD", "AAB", "ABAB"]
CASES = cases.OP_CASES


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[len("case_"):])
def test_collective_on_layout(pools, layout, case):
    pools(len(layout), layout=layout).run(case, 7)


def case_schedules_were_hierarchical():
    """The layered pool really ran hierarchical schedules (not a flat fallback)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(1 << 18)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
    info = dist.group.WORLD._get_backend(torch.device("cpu"))
    return info.name()


def test_layered_groups_see_several_hosts(pools, capfd):
    import os

    # HIER_DEBUG is read once per process: a fresh job shows the schedule it chose.
    from harness import run_job

    def env(rank):
        return {"HIER_HOST_ID": f"host-{'AABB'[rank]}", "HIER_DEBUG": "INFO"}

    run_job(4, case_schedules_were_hierarchical, env=env)
    err = capfd.readouterr().err
    assert "allreduce: split_rail" in err and "2 nodes: [0 1] [2 3]" in err, err[-3000:]
