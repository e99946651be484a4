"""DataLoader runs meant for a tiny /dev/shm (see the fixtures' HOW.md for the mount).

python dataloader_shm.py                 # batches go through /dev/shm (torch's default
                                         # file_descriptor strategy): worker fails to
                                         # allocate the batch's shared memory
python dataloader_shm.py file_system     # same with the file_system sharing strategy
python dataloader_shm.py shared_cache    # the Dataset keeps a shared-memory sample cache
                                         # (multiprocessing.shared_memory): writing to a
                                         # page /dev/shm cannot back raises SIGBUS
"""

import sys
from multiprocessing import shared_memory

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

SHAPE = (3, 512, 683)  # ~4 MiB float32 "image"


class Images(Dataset):
    def __init__(self, shared_cache=False):
        self.shared_cache = shared_cache
        self.blocks = []

    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.randn(*SHAPE)
        if self.shared_cache:
            shm = shared_memory.SharedMemory(create=True, size=x.numel() * 4)
            self.blocks.append(shm)
            cached = torch.frombuffer(shm.buf, dtype=torch.float32).view(SHAPE)
            cached.copy_(x)  # touches every page of the new /dev/shm file
            x = cached.clone()
        return x, i % 10


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "file_descriptor"
    if mode in ("file_system", "file_descriptor"):
        mp.set_sharing_strategy(mode)
    loader = DataLoader(Images(shared_cache=mode == "shared_cache"), batch_size=4, num_workers=2)
    for step, (x, _y) in enumerate(loader):
        print(f"step {step} batch {tuple(x.shape)} mean {x.mean().item():.4f}", flush=True)


if __name__ == "__main__":
    main()
