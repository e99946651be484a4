"""A tiny training loop whose DataLoader worker 0 grows an unbounded per-worker cache.

Each worker process has its own copy of the Dataset; worker 0 keeps every sample it ever
produced plus a 16 MiB "decoded" buffer per item in `self.cache`, so only it grows until the
memory cgroup's limit makes the kernel OOM-kill it (kernel comm: pt_data_worker).
"""

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

GROW = 16 * 1024 * 1024


class LeakyDataset(Dataset):
    def __init__(self, n=100_000):
        self.n = n
        self.cache = {}

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.randn(32)
        info = get_worker_info()
        if info is not None and info.id == 0:
            self.cache[i] = (x, bytearray(b"\x01") * GROW)  # the "leak"
        return x, torch.tensor(float(x.sum() > 0))


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(LeakyDataset(), batch_size=4, num_workers=2)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
