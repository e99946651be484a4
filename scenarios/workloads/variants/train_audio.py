"""Keyword-spotting style audio classifier on log-mel spectrograms, with 3 DataLoader workers.

    python train_audio.py --clips 2400 --epochs 2 [--v2]

Clips are "decoded" (synthesized here from the file name, a stand-in for reading a FLAC file)
and turned into a 128 x 500 log-mel spectrogram in the workers. Plain ``print`` logging.

What goes wrong (only said here): ``load_clip`` is wrapped in
``functools.lru_cache(maxsize=None)`` to skip decoding in later epochs. Each worker process has its
own copy of that cache (the workers are persistent, so it lives across epochs), which keeps every
spectrogram it has produced (256 KiB each): the workers grow by ~100 MiB per second between them
until one is killed. The fixed twin (``--v2``) bounds
the cache to 64 entries.
"""

import argparse
import functools
import time
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

SR, N_FFT, HOP, N_MELS = 16000, 400, 160, 128
MEL = np.abs(np.random.default_rng(0).standard_normal((N_FFT // 2 + 1, N_MELS))).astype(np.float32)


def decode_clip(path, seconds=5):
    rng = np.random.default_rng(zlib.crc32(path.encode()))
    wave = rng.standard_normal(SR * seconds).astype(np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(wave, N_FFT)[::HOP][:500]
    spec = np.abs(np.fft.rfft(frames * np.hanning(N_FFT).astype(np.float32), axis=1)) ** 2
    return np.log1p(spec.astype(np.float32) @ MEL).T.copy()


load_clip = None  # set in main()


class Clips(Dataset):
    def __init__(self, n):
        self.paths = [f"audio/train/spk{i % 97:03d}/utt{i:06d}.flac" for i in range(n)]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return torch.from_numpy(load_clip(self.paths[i])), i % 12


def main():
    global load_clip
    p = argparse.ArgumentParser()
    p.add_argument("--clips", type=int, default=2400)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()
    load_clip = functools.lru_cache(maxsize=64 if args.v2 else None)(decode_clip)

    loader = DataLoader(
        Clips(args.clips), batch_size=args.batch_size, shuffle=True, num_workers=args.workers, persistent_workers=True
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(N_MELS, 64, 5, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool1d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 12),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        t0, seen = time.time(), 0
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(y)
            if step % 25 == 0:
                rate = seen / (time.time() - t0)
                print(f"epoch {epoch} step {step}/{len(loader)} loss {loss.item():.3f} ({rate:.0f} clips/s)")
        print(f"epoch {epoch} done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
