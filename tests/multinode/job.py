"""What every rank of a multi-node test job runs (under torchrun, on simulated hosts): the collective suite
of tests/python on the world group and, on torch 2.14 on, one-sided windows' puts between hosts; then a
short DDP training run on hier and on Gloo over the same data, whose losses must agree. Exits non-zero,
with the failures, when anything is wrong."""

import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import test_collectives as cases  # noqa: E402
import test_ddp  # noqa: E402
import test_windows  # noqa: E402

CASES = cases.OP_CASES + [cases.case_barrier_and_many_in_flight]
if test_windows.TORCH_RELEASE >= (2, 14):  # one-sided windows: puts between hosts, over TCP
    CASES += [test_windows.case_everyone_puts_into_everyone, test_windows.case_target_never_calls_in]
ARGS = {test_windows.case_everyone_puts_into_everyone: ([torch.float32, torch.int64],),
        test_windows.case_target_never_calls_in: ()}


def main():
    dist.init_process_group("hier")
    rank = dist.get_rank()
    failures = []
    for case in CASES:
        try:
            case(*ARGS.get(case, (11,)))
        except Exception:
            failures.append(f"{case.__name__}: {traceback.format_exc()}")
    # DDP on hier, then on Gloo over the same ranks and data.
    losses = {}
    for backend in ("hier", "gloo"):
        group = None if backend == "hier" else dist.new_group(backend="gloo")
        losses[backend] = test_ddp.train(12, group)[0]
    if not torch.allclose(torch.tensor(losses["hier"]), torch.tensor(losses["gloo"]), rtol=1e-5, atol=1e-6):
        failures.append(f"DDP losses differ: hier {losses['hier']} gloo {losses['gloo']}")
    if losses["hier"][-1] >= losses["hier"][0]:
        failures.append(f"DDP loss did not go down: {losses['hier']}")
    topology = [None] * dist.get_world_size()
    dist.all_gather_object(topology, os.uname().nodename)
    # Which UCX transports crossed hosts, as torch_hier.info() says: the simulated hosts have TCP alone.
    import torch_hier

    info = torch_hier.info()
    between = info["ucx_transports_between_hosts"]
    if len(set(topology)) > 1 and (not between or not all(t.startswith("tcp/") for t in between)):
        failures.append(f"info() names no TCP transport between hosts: {between}")
    if topology.count(os.uname().nodename) > 1 and not info["ucx_transports_inside_host"]:
        failures.append("info() names no transport inside the host, which has several ranks")
    dist.destroy_process_group()
    if failures:
        print(f"rank {rank} FAILED:\n" + "\n".join(failures), flush=True)
        sys.exit(1)
    print(f"rank {rank} ok: {len(CASES)} collective cases and DDP on hosts {topology}; UCX between hosts "
          f"{between}, inside {info['ucx_transports_inside_host']}, devices {info['ucx_net_devices']}", flush=True)


if __name__ == "__main__":
    main()
