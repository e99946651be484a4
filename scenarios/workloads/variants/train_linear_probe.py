"""Linear probe on precomputed 256-d embeddings (single process, CPU, ``print`` logging).

    python train_linear_probe.py --rows 400000 --epochs 2

The embeddings (400,000 x 256 float32, ~390 MiB; synthesized here, a stand-in for ``np.load`` of
an encoder's output) are held in memory and sampled in batches. Healthy on its own; used where
another program started from the same job script takes part of the memory.
"""

import argparse
import time

import numpy as np
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2048)
    args = p.parse_args()

    t0 = time.time()
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((args.rows, args.dim), dtype=np.float32)
    labels = (emb[:, :8].argmax(1)).astype(np.int64)
    print(f"loaded embeddings {emb.shape} in {time.time() - t0:.1f}s")

    torch.manual_seed(0)
    probe = torch.nn.Linear(args.dim, 8)
    opt = torch.optim.SGD(probe.parameters(), lr=0.5)
    x_all, y_all = torch.from_numpy(emb), torch.from_numpy(labels)
    for epoch in range(args.epochs):
        perm = torch.randperm(args.rows)
        for step, start in enumerate(range(0, args.rows, args.batch_size)):
            idx = perm[start : start + args.batch_size]
            loss = torch.nn.functional.cross_entropy(probe(x_all[idx]), y_all[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
    acc = (probe(x_all[:20000]).argmax(1) == y_all[:20000]).float().mean().item()
    print(f"train accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
