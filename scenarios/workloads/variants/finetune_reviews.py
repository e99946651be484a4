"""Train a bag-of-words review classifier on a parquet export, with ``accelerate`` (2 CPU processes).

    accelerate launch --multi_gpu --num_processes 2 finetune_reviews.py --train-file data/train.parquet

Each process loads the parquet file through ``datasets.load_dataset("parquet", ...)`` (the Arrow
conversion is already in the ``datasets`` cache) and tokenizes on the fly in the collate function.

What goes wrong (only said here): ``load_dataset(..., keep_in_memory=True)`` copies the whole Arrow
table into each process's anonymous memory, so the two processes hold two private copies of the
~300 MiB of text. The fixed twin (``--from-arrow-files``) lets ``datasets`` memory-map the cached
Arrow file (the default): one copy in the page cache, shared by both processes.
"""

import argparse
import logging
import zlib

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from datasets import load_dataset
from torch.utils.data import DataLoader

logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
logger = get_logger(__name__)

VOCAB = 1 << 16


def encode(text, max_len=256):
    return [zlib.crc32(w.encode()) % VOCAB for w in text.split()[:max_len]]


def collate(rows):
    ids = [torch.tensor(encode(r["text"])) for r in rows]
    offsets = torch.tensor([0] + [len(x) for x in ids[:-1]]).cumsum(0)
    return torch.cat(ids), offsets, torch.tensor([r["label"] for r in rows])


class BagOfWords(torch.nn.Module):
    def __init__(self, vocab, dim, classes):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(vocab, dim, mode="mean")
        self.out = torch.nn.Linear(dim, classes)

    def forward(self, ids, offsets):
        return self.out(self.emb(ids, offsets))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train-file", required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--from-arrow-files", action="store_true")
    args = p.parse_args()

    accelerator = Accelerator(cpu=True)
    logger.info(accelerator.state, main_process_only=False)
    with accelerator.main_process_first():
        if args.from_arrow_files:
            raw = load_dataset("parquet", data_files={"train": args.train_file}, split="train")
        else:
            raw = load_dataset("parquet", data_files={"train": args.train_file}, split="train", keep_in_memory=True)
    logger.info(f"{len(raw):,} reviews, columns {raw.column_names}")

    torch.manual_seed(0)
    model = BagOfWords(VOCAB, 32, 5)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loader = DataLoader(raw, batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    model, opt, loader = accelerator.prepare(model, opt, loader)

    model.train()
    for step, (ids, offsets, labels) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(ids, offsets), labels)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        if step % 10 == 0:
            logger.info(f"step {step} loss {loss.item():.4f}")
        if step + 1 >= args.max_steps:
            break
    accelerator.wait_for_everyone()
    logger.info("training finished")


if __name__ == "__main__":
    main()
