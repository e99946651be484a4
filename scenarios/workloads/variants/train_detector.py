"""Multi-label object presence pretraining on COCO-style annotations, DDP with torchrun (2 ranks x 2 workers).

    torchrun --nproc-per-node 2 train_detector.py --annotations instances.json [--packed]

Each rank parses ``instances.json`` and indexes the annotations per image; its two DataLoader
workers build the targets (boxes, categories) of each image. Images are synthetic here (a
stand-in for JPEG decoding) so that the job only needs the annotation file.

What goes wrong (only said here): the per-image index is Python objects, a dict of image dicts and
a dict of lists of annotation dicts, each with a ``bbox`` list of floats: 240 MiB per rank. The
forked workers share it with their rank at first, but building a target increments the refcounts
of the image's dicts, lists and floats, so the pages they sit on are copied into the worker; over
the epoch each worker's private memory climbs towards the size of the index. The fixed twin
(``--packed``) converts the index into numpy arrays (boxes, categories, per-image offsets) and drops
the parsed JSON before the workers start.
"""

import argparse
import gc
import json
import logging
from collections import defaultdict

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
log = logging.getLogger("train_detector")
NUM_CLASSES = 80


def fake_image(image_id, size=32):
    g = torch.Generator().manual_seed(image_id)
    return torch.rand(3, size, size, generator=g)


class CocoIndex(Dataset):
    def __init__(self, coco):
        self.imgs = {img["id"]: img for img in coco["images"]}
        self.anns = defaultdict(list)
        for ann in coco["annotations"]:
            self.anns[ann["image_id"]].append(ann)
        self.ids = list(self.imgs)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        img = self.imgs[self.ids[i]]
        anns = self.anns[img["id"]]
        boxes = torch.tensor([a["bbox"] for a in anns]) / torch.tensor([img["width"], img["height"]] * 2)
        target = torch.zeros(NUM_CLASSES)
        target[[a["category_id"] - 1 for a in anns]] = 1.0
        return fake_image(img["id"]), target, boxes.mean(0)


class PackedIndex(Dataset):
    def __init__(self, coco):
        images = sorted(coco["images"], key=lambda im: im["id"])
        self.ids = np.array([im["id"] for im in images], dtype=np.int64)
        self.wh = np.array([[im["width"], im["height"]] for im in images], dtype=np.float32)
        anns = sorted(coco["annotations"], key=lambda a: a["image_id"])
        self.boxes = np.array([a["bbox"] for a in anns], dtype=np.float32)
        self.cats = np.array([a["category_id"] - 1 for a in anns], dtype=np.int64)
        owner = np.array([a["image_id"] for a in anns], dtype=np.int64)
        self.start = np.searchsorted(owner, self.ids, side="left")
        self.end = np.searchsorted(owner, self.ids, side="right")

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        s, e = self.start[i], self.end[i]
        boxes = torch.from_numpy(self.boxes[s:e]) / torch.from_numpy(np.tile(self.wh[i], 2))
        target = torch.zeros(NUM_CLASSES)
        target[torch.from_numpy(self.cats[s:e])] = 1.0
        return fake_image(int(self.ids[i])), target, boxes.mean(0)


def build_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, NUM_CLASSES + 4),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--annotations", required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--packed", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(args.annotations) as f:
        coco = json.load(f)
    ds = PackedIndex(coco) if args.packed else CocoIndex(coco)
    del coco
    gc.collect()
    if rank == 0:
        log.info("indexed %d images", len(ds))

    torch.manual_seed(0)
    model = DDP(build_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = DistributedSampler(ds, shuffle=True)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for step, (x, target, box) in enumerate(loader):
            out = model(x)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(out[:, :NUM_CLASSES], target)
            loss = loss + torch.nn.functional.l1_loss(out[:, NUM_CLASSES:].sigmoid(), box)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0 and step % 50 == 0:
                log.info("epoch %d step %d/%d loss %.4f", epoch, step, len(loader), loss.item())
    if rank == 0:
        log.info("done")
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
