"""CTC speech recognition on log-mel features, DDP with torchrun (2 ranks, 2 DataLoader workers each).

    torchrun --nproc-per-node 2 train_asr.py [--v2]

Utterances (15 s, 80 mel bins at 100 frames/s) are featurized in the workers (synthesized per
index here, a stand-in for decoding and computing the filterbank). Logging: ``logging`` on rank 0.

What goes wrong (only said here): the loaders are built with ``prefetch_factor=24``: each rank's
2 workers keep up to 48 batches of 16 x 80 x 1500 float32 (7.3 MiB) ready, and since the
recurrent encoder is slower than featurization the queues fill up: ~700 MiB of batches in shared
memory across the two ranks, charged to the cgroup but in no process's RSS. The kernel kills the
largest process, a rank. The fixed twin (``--v2``) uses the default prefetch_factor (2).
"""

import argparse
import logging

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

logging.basicConfig(format="%(asctime)s %(levelname)-7s %(message)s", level=logging.INFO)
log = logging.getLogger("asr")
TOKENS = 32


class Utterances(Dataset):
    def __init__(self, n, frames=1500, mels=80):
        self.n, self.frames, self.mels = n, frames, mels

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        feats = torch.randn(self.mels, self.frames, generator=g)
        target = torch.randint(1, TOKENS, (40,), generator=g)
        return feats, target


class Encoder(torch.nn.Module):
    def __init__(self, mels=80, dim=96):
        super().__init__()
        self.sub = torch.nn.Conv1d(mels, dim, 4, stride=4)
        self.rnn = torch.nn.GRU(dim, dim, batch_first=True)
        self.out = torch.nn.Linear(dim, TOKENS)

    def forward(self, x):
        h, _ = self.rnn(self.sub(x).transpose(1, 2))
        return self.out(h).log_softmax(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--utterances", type=int, default=16 * 200)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = Utterances(args.utterances)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        sampler=DistributedSampler(ds),
        num_workers=2,
        prefetch_factor=2 if args.v2 else 24,
    )
    torch.manual_seed(0)
    model = DDP(Encoder())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ctc = torch.nn.CTCLoss()
    for step, (feats, target) in enumerate(loader):
        logp = model(feats).transpose(0, 1)
        in_len = torch.full((feats.shape[0],), logp.shape[0], dtype=torch.long)
        loss = ctc(logp, target, in_len, torch.full((feats.shape[0],), target.shape[1], dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 5 == 0:
            log.info("step %d ctc %.3f", step, loss.item())
        if step + 1 == args.max_steps:
            break
    if rank == 0:
        log.info("stopping after %d steps", args.max_steps)
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
