"""Train a tiny ViT (built from a config, no download) with the HF Trainer and 2 DataLoader workers.

    python train_vit_tiny.py --images 4000 --max-steps 150 [--v2]

Each sample is decoded (synthesized from the image id here, a stand-in for a JPEG) at 224 x 224,
then randomly cropped to 64 x 64 and flipped. Logging: the ``logging`` module plus what the
Trainer prints.

What goes wrong (only said here): the Dataset keeps every decoded image, ``self._decoded[idx]``,
so that later epochs only crop. Each of the 2 workers has its own copy of the Dataset and so its
own dict, which gains a 588 KiB float32 image per new sample until a worker is killed. The fixed
twin (``--v2``) decodes every time.
"""

import argparse
import logging
import os
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification

logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
logger = logging.getLogger("train_vit_tiny")


class Images(Dataset):
    def __init__(self, n, v2=False, crop=64):
        self.n, self.v2, self.crop = n, v2, crop
        self._decoded = {}

    def __len__(self):
        return self.n

    def decode(self, idx):
        g = torch.Generator().manual_seed(idx)
        return torch.randint(0, 256, (3, 224, 224), generator=g, dtype=torch.uint8).float() / 255.0

    def __getitem__(self, idx):
        if self.v2:
            img = self.decode(idx)
        else:
            if idx not in self._decoded:
                self._decoded[idx] = self.decode(idx)
            img = self._decoded[idx]
        top, left = torch.randint(0, 224 - self.crop, (2,)).tolist()
        x = img[:, top : top + self.crop, left : left + self.crop]
        if torch.rand(()) < 0.5:
            x = x.flip(-1)
        return {"pixel_values": x, "labels": idx % 10}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=4000)
    p.add_argument("--max-steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "vit-tiny"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    config = ViTConfig(
        image_size=64,
        patch_size=8,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        num_labels=10,
    )
    torch.manual_seed(0)
    model = ViTForImageClassification(config)
    train = Images(args.images, v2=args.v2)
    logger.info("train set: %d images, model: %.2fM params", len(train), model.num_parameters() / 1e6)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps,
        learning_rate=1e-3,
        logging_steps=25,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=2,
        dataloader_persistent_workers=True,
    )
    Trainer(model=model, args=training_args, train_dataset=train).train()
    logger.info("finished")


if __name__ == "__main__":
    main()
