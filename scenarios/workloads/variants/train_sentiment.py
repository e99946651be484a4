"""Five-class review rating with a tiny BERT (built from a config) and the HF Trainer, single process.

    python train_sentiment.py --train reviews/train.parquet [--lazy]

Reviews are tokenized with a hashing tokenizer (words into an 8k vocabulary, 128 tokens at most).
Logging: ``logging`` for the script's own lines, plus what the Trainer prints.

What goes wrong (only said here): the parquet file is read with pandas and turned into
``df.to_dict("records")``, and every review is tokenized up front into Python lists of ints kept
in a list of feature dicts: 128,000 records and ~12 million token ints as Python objects (~36 bytes
each) on top of the Trainer process, before training starts. The fixed twin (``--lazy``) keeps the
``pyarrow`` table and tokenizes each review in ``__getitem__``.
"""

import argparse
import logging
import os
import tempfile
import zlib

import pandas as pd
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

logging.basicConfig(format="%(asctime)s | %(levelname)s | %(message)s", level=logging.INFO)
log = logging.getLogger("sentiment")
VOCAB, MAX_LEN = 8192, 128


def encode(text):
    return [2 + zlib.crc32(w.encode()) % (VOCAB - 2) for w in text.split()[:MAX_LEN]]


class Features(Dataset):
    def __init__(self, path):
        records = pd.read_parquet(path).to_dict("records")
        log.info("read %d reviews", len(records))
        self.features = [{"input_ids": encode(r["text"]), "labels": r["label"]} for r in records]
        log.info("tokenized %d reviews", len(self.features))

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return self.features[i]


class LazyFeatures(Dataset):
    def __init__(self, path):
        table = pq.read_table(path, columns=["text", "label"])
        self.text, self.label = table.column("text"), table.column("label")
        log.info("read %d reviews", len(self.text))

    def __len__(self):
        return len(self.text)

    def __getitem__(self, i):
        return {"input_ids": encode(self.text[i].as_py()), "labels": self.label[i].as_py()}


def pad(batch):
    ids = torch.zeros(len(batch), MAX_LEN, dtype=torch.long)
    for row, f in enumerate(batch):
        ids[row, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": torch.tensor([f["labels"] for f in batch])}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "sentiment"))
    p.add_argument("--lazy", action="store_true")
    args = p.parse_args()

    train = LazyFeatures(args.train) if args.lazy else Features(args.train)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=MAX_LEN,
        num_labels=5,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=16,
        max_steps=args.max_steps,
        logging_steps=20,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    Trainer(model=model, args=training_args, train_dataset=train, data_collator=pad).train()
    log.info("done")


if __name__ == "__main__":
    main()
