"""Fine-tune a classification head on top of a pretrained encoder with Lightning DDP (2 CPU processes).

The encoder comes from a Lightning pretraining run (``trainer.save_checkpoint``: weights, Adam
moments, loop state); the head is trained while the encoder stays frozen. The encoder is built in
``configure_model()``, the hook Lightning calls in every process once the processes exist.

    python finetune_cls.py --init-from PRETRAIN.ckpt [--v2]

What goes wrong (only said here): ``configure_model`` calls
``PretrainModule.load_from_checkpoint(path)``, which ``torch.load``s the whole checkpoint
(100 MiB of weights plus 200 MiB of Adam moments) into private memory, in both processes at
once, after building a randomly initialised copy of the model. The fixed twin (``--v2``) builds
the encoder and reads only its weights with ``torch.load(path, mmap=True)``: the file stays in the
page cache, and the optimizer state is never read.
"""

import argparse
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

VOCAB = 8000


class Encoder(torch.nn.Module):
    def __init__(self, dim, layers):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, dim)
        self.blocks = torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU()) for _ in range(layers)]
        )

    def forward(self, ids):
        return self.blocks(self.emb(ids)).mean(dim=1)


class PretrainModule(L.LightningModule):
    def __init__(self, dim=1024, layers=9):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = Encoder(dim, layers)
        self.lm_head = torch.nn.Linear(dim, VOCAB)

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        return torch.nn.functional.cross_entropy(self.lm_head(self.encoder(ids[:, :-1])), ids[:, -1])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)


class Classifier(L.LightningModule):
    def __init__(self, init_from, num_classes=4, lr=1e-3, v2=False):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = None
        self.head = torch.nn.Linear(1024, num_classes)

    def configure_model(self):
        if self.encoder is not None:
            return
        if self.hparams.v2:
            ckpt = torch.load(self.hparams.init_from, map_location="cpu", mmap=True, weights_only=False)
            hp = ckpt["hyper_parameters"]
            self.encoder = Encoder(hp["dim"], hp["layers"])
            prefix = "encoder."
            self.encoder.load_state_dict(
                {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
            )
            del ckpt
        else:
            self.encoder = PretrainModule.load_from_checkpoint(self.hparams.init_from, map_location="cpu").encoder
        self.encoder.requires_grad_(False)

    def training_step(self, batch, batch_idx):
        ids, y = batch
        loss = torch.nn.functional.cross_entropy(self.head(self.encoder(ids)), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.head.parameters(), lr=self.hparams.lr)


def pretrain_checkpoint(path, mb):
    """What the pretraining run saved: an encoder of about ``mb`` MiB, after one optimizer step."""
    dim = 1024
    layers = max(1, (mb * (1 << 20) - 2 * VOCAB * dim * 4) // (dim * dim * 4))
    torch.manual_seed(0)
    module = PretrainModule(dim=dim, layers=int(layers))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(TensorDataset(torch.randint(0, VOCAB, (8, 17))), batch_size=8))
    trainer.save_checkpoint(str(path))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init-from", required=True)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--root-dir", default=os.path.join(tempfile.gettempdir(), "finetune-cls"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    L.seed_everything(42)
    ids = torch.randint(0, VOCAB, (args.samples, 32))
    data = TensorDataset(ids, ids[:, 0] % 4)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=args.max_steps,
        default_root_dir=args.root_dir,
        enable_checkpointing=False,
        log_every_n_steps=5,
    )
    trainer.fit(Classifier(args.init_from, v2=args.v2), DataLoader(data, batch_size=args.batch_size, shuffle=True))


if __name__ == "__main__":
    main()
