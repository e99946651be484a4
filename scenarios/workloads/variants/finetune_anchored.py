"""Fine-tune the top of a pretrained MLP trunk with a new head, anchored to the pretrained network, under torchrun.

    torchrun --nproc-per-node 2 finetune_anchored.py --init CKPT [--v2]

CKPT is the last ``save_checkpoint`` of the pretraining run (weights, their EMA, Adam state, step).
Each rank restores the trunk from it, trains its top 3 layers and a new 10-class head, and keeps the
pretrained weights as a frozen reference network: the loss adds the distance between the fine-tuned
trunk's features and the reference's (``torch.func.functional_call`` with the pretrained tensors), so
that the fine-tune does not drift far from what pretraining learned. Rank 0 prints every 25 steps.

What goes wrong (only said here): ``ckpt = torch.load(path, map_location="cpu")`` reads the whole
340 MiB file into each rank's anonymous memory, and the dict stays alive for the whole run because the
reference weights are ``ckpt["model"]`` (the EMA and the Adam moments of pretraining ride along).
``--v2`` loads with ``mmap=True`` and keeps only ``ckpt["model"]``: those pages stay in the page cache,
shared by both ranks, and the rest of the file is never read.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.func import functional_call
from torch.nn.parallel import DistributedDataParallel as DDP


class Trunk(torch.nn.Sequential):
    """The pretraining trunk: Linear(dim, dim) layers with GELUs between them."""

    def __init__(self, layers=9, dim=1536):
        super().__init__(*[torch.nn.Linear(dim, dim) for _ in range(layers)])

    def forward(self, x):
        for i, layer in enumerate(self):
            x = layer(x)
            if i < len(self) - 1:
                x = F.gelu(x)
        return F.layer_norm(x, x.shape[-1:])


class Classifier(torch.nn.Module):
    def __init__(self, trunk, classes=10):
        super().__init__()
        self.trunk = trunk
        self.head = torch.nn.Linear(trunk[0].in_features, classes)

    def forward(self, x):
        feats = self.trunk(x)
        return feats, self.head(feats)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", required=True, help="pretraining checkpoint")
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--anchor", type=float, default=0.5)
    p.add_argument("--train-top", type=int, default=3)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    trunk = Trunk()
    t0 = time.time()
    if args.v2:
        ckpt = torch.load(args.init, map_location="cpu", mmap=True)
        reference, pretrain_step = ckpt["model"], ckpt["step"]
        del ckpt
    else:
        ckpt = torch.load(args.init, map_location="cpu")
        reference, pretrain_step = ckpt["model"], ckpt["step"]
    trunk.load_state_dict(reference)
    if rank == 0:
        print(
            f"initialized from {os.path.basename(args.init)} (step {pretrain_step}) in {time.time() - t0:.1f}s",
            flush=True,
        )
    for layer in list(trunk)[: len(trunk) - args.train_top]:
        layer.requires_grad_(False)

    torch.manual_seed(0)
    model = DDP(Classifier(trunk))
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    dim = trunk[0].in_features
    g = torch.Generator().manual_seed(1234 + rank)
    teacher = torch.randn(dim, 10, generator=torch.Generator().manual_seed(7))
    t0, correct, seen = time.time(), 0, 0
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, dim, generator=g)
        with torch.no_grad():
            ref_feats = functional_call(trunk, reference, (x,))
        y = (ref_feats @ teacher / dim**0.5 + torch.randn(len(x), 10, generator=g)).argmax(-1)  # noisy labels
        feats, logits = model(x)
        task = F.cross_entropy(logits, y)
        drift = F.mse_loss(feats, ref_feats)
        loss = task + args.anchor * drift
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        correct += (logits.argmax(-1) == y).sum().item()
        seen += len(y)
        if rank == 0 and step % 25 == 0:
            print(
                f"step {step}/{args.steps}  loss {loss.item():.4f}  ce {task.item():.4f}  "
                f"anchor {drift.item():.5f}  acc {correct / seen:.3f}  ({(time.time() - t0) / step:.2f}s/step)",
                flush=True,
            )
            correct = seen = 0
    dist.barrier()
    if rank == 0:
        print(f"finished {args.steps} steps in {time.time() - t0:.1f}s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
