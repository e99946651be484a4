"""Image classification with a small ResNet (built from a config) and the HF Trainer, CPU, with the
DataLoader settings copied from a GPU recipe "for throughput".

    python train_resnet_trainer.py [--v2]

Images are "decoded" in 4 DataLoader workers (synthesized per index here, a stand-in for JPEG
decoding at 128 x 128). Nothing is printed but what the Trainer prints.

What goes wrong (only said here): ``TrainingArguments(dataloader_num_workers=4,
dataloader_prefetch_factor=24, dataloader_pin_memory=True)`` lets up to 4 x 24 batches of
32 x 3 x 128 x 128 float32 (6 MiB each) wait in shared memory while the training step is far
slower than the workers; CPU-only torch ignores pin_memory with a warning, the queued batches stay.
They are shmem charged to the cgroup but mapped by no process, so the kernel kills the largest
process, the Trainer. The fixed twin (``--v2``) keeps the default prefetch_factor (2).
"""

import argparse
import os
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import ResNetConfig, ResNetForImageClassification, Trainer, TrainingArguments


class DecodedImages(Dataset):
    def __init__(self, n, size=128):
        self.n, self.size = n, size

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        return {"pixel_values": torch.rand(3, self.size, self.size, generator=g), "labels": idx % 10}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=32 * 500)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "resnet-cpu"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)
    torch.manual_seed(0)
    model = ResNetForImageClassification(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=32,
        max_steps=args.max_steps,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=4,
        dataloader_prefetch_factor=None if args.v2 else 24,
        dataloader_pin_memory=True,
    )
    Trainer(model=model, args=training_args, train_dataset=DecodedImages(args.images)).train()


if __name__ == "__main__":
    main()
