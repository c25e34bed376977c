"""Hugging Face Accelerate on a group made first with init_process_group (Accelerate's PartialState takes
only gloo and mpi by name on CPU, and uses a group that already exists), launched by torchrun: training,
wait_for_everyone (a barrier with device_ids), gather_for_metrics on an uneven last batch, reduce."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _common import arguments, carried_by, save


def main():
    args = arguments()
    dist.init_process_group(args.backend)
    accelerator = Accelerator(cpu=True)
    set_seed(5)
    model = nn.Sequential(nn.Linear(12, 20), nn.GELU(), nn.Linear(20, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    data = torch.Generator().manual_seed(11)
    x = torch.randn(200, 12, generator=data)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    train = DataLoader(TensorDataset(x[:160], y[:160]), batch_size=8, shuffle=True,
                       generator=torch.Generator().manual_seed(2))
    val = DataLoader(TensorDataset(x[160:], y[160:]), batch_size=7)  # 40 rows: uneven last batches
    model, optimizer, train, val = accelerator.prepare(model, optimizer, train, val)
    for _ in range(2):
        model.train()
        for xb, yb in train:
            loss = F.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    accelerator.wait_for_everyone()
    model.eval()
    predictions, labels = [], []
    with torch.no_grad():
        for xb, yb in val:
            p, l = accelerator.gather_for_metrics((model(xb).argmax(1), yb))
            predictions.append(p)
            labels.append(l)
    total = accelerator.reduce(torch.tensor([float(accelerator.process_index + 1)]), reduction="sum")
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    save(
        args.out,
        accelerator.process_index,
        params={k: v.detach().clone() for k, v in unwrapped.state_dict().items()},
        predictions=torch.cat(predictions),
        labels=torch.cat(labels),
        reduced=total,
        **carried_by(),
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
