"""PyTorch Lightning's Trainer with DDPStrategy(process_group_backend=...), launched by torchrun: two epochs
of a small classifier, with validation and metrics synchronized across ranks (sync_dist)."""

import lightning as L
import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _common import arguments, carried_by, save


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))

    def training_step(self, batch, _):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), sync_dist=True)
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


def main():
    args = arguments()
    L.seed_everything(1234, verbose=False)
    data = torch.Generator().manual_seed(7)
    x = torch.randn(384, 16, generator=data)
    y = (x[:, :4].argmax(1) + (x[:, 4] > 1).long()) % 4
    train = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=16)
    val = DataLoader(TensorDataset(x[320:], y[320:]), batch_size=16)
    model = Classifier()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend=args.backend),
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
    trainer.fit(model, train, val)
    save(
        args.out,
        dist.get_rank(),
        params={k: v.detach().clone() for k, v in model.state_dict().items()},
        metrics={k: float(v) for k, v in trainer.callback_metrics.items()},
        steps=trainer.global_step,
        **carried_by(),
    )


if __name__ == "__main__":
    main()
