"""What every framework job shares: its arguments, the record of which backend carried it, and its results
file (one per rank, compared by tests/frameworks/test_frameworks.py between a run on hier and one on Gloo)."""

import argparse
import json
import os

import torch
import torch.distributed as dist


def arguments(**extra):
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True, choices=["hier", "gloo"])
    parser.add_argument("--out", required=True, help="folder for rank<N>.pt")
    for name, default in extra.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    return parser.parse_args()


def carried_by(*groups):
    """The default group's backend name and, on hier, the operations the work tables of `groups` (default:
    the default group) saw finish lately (each keeps its last 32): proof that the framework's collectives
    went through hier, not around it."""
    name = dist.get_backend()
    ops = set()
    if name == "hier":
        import torch_hier

        for group in groups or (dist.group.WORLD,):
            ops |= {row["op"] for row in json.loads(torch_hier.work_table(group, format="json"))["history"]}
    return {"backend": name, "hier_ops": sorted(ops)}


def save(out, rank, **results):
    os.makedirs(out, exist_ok=True)
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
