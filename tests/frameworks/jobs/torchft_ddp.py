"""torchft: two replica groups of one rank each train with its Manager and DistributedDataParallel, the
Manager's process group being the backend under test (hier through a torchft ProcessGroupWrapper, as a user
would write one, or torchft's ProcessGroupGloo). Run without --replica it starts a Lighthouse and both
replicas. A step the Manager does not commit is a lost step; every replica must commit every step."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed import ProcessGroup as BaseProcessGroup
from torchft import DistributedDataParallel, Manager, Optimizer
from torchft.coordination import LighthouseServer
from torchft.process_group import ProcessGroupGloo, ProcessGroupWrapper

from _common import arguments, save

STEPS = 12


class ProcessGroupHier(ProcessGroupWrapper):
    """A reconfigurable hier group: torchft makes a new one for each quorum (and aborts the old one)."""

    def _create_pg(self, store, rank, world_size):
        import torch_hier

        group = BaseProcessGroup(store, rank, world_size)
        group._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        backend = torch_hier.ProcessGroupHier(store, rank, world_size, self._timeout,
                                              group_name=f"torchft_hier_{self._quorum_id}")
        group._register_backend(torch.device("cpu"), BaseProcessGroup.BackendType.CUSTOM, backend)
        return group

    def getBackendName(self):
        return "torchft-hier"


def replica(args):
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    group = ProcessGroupHier() if args.backend == "hier" else ProcessGroupGloo()
    manager = Manager(
        pg=group,
        min_replica_size=2,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica{args.replica}",
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=args.lighthouse,
        timeout=timedelta(seconds=30),
    )
    ddp = DistributedDataParallel(manager, model)
    inner = torch.optim.Adam(model.parameters(), lr=1e-2)
    optimizer = Optimizer(manager, inner)
    data = torch.Generator().manual_seed(1000 + args.replica)
    iterations, losses = 0, []
    while manager.current_step() < STEPS:
        iterations += 1
        x = torch.randn(4, 6, generator=data)
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp(x), (x[:, 0] > 0).long() + (x[:, 1] > 0).long())
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    carried = []
    if args.backend == "hier":
        import torch_hier

        history = json.loads(torch_hier.work_table(group.parent, format="json"))["history"]
        carried = sorted({row["op"] for row in history})
    manager.shutdown(wait=False)
    save(
        args.out,
        args.replica,
        params={k: v.detach().clone() for k, v in model.state_dict().items()},
        iterations=iterations,
        committed=manager.current_step(),
        backend=group.getBackendName(),
        hier_ops=carried,
    )


def main():
    args = arguments(replica=-1, lighthouse="")
    if args.replica >= 0:
        return replica(args)
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    replicas = [
        subprocess.Popen([sys.executable, __file__, "--backend", args.backend, "--out", args.out,
                          "--replica", str(r), "--lighthouse", lighthouse.address()], env=os.environ)
        for r in range(2)
    ]
    codes = [p.wait(timeout=240) for p in replicas]
    lighthouse.shutdown()
    sys.exit(0 if all(code == 0 for code in codes) else 1)  # a signal's code is negative


if __name__ == "__main__":
    main()
