"""Fine-tune a small BERT classifier on a pre-tokenized dataset with the HF Trainer, under torchrun.

The user saved the tokenized corpus with ``save_to_disk`` once and trains on it on every node:

    torchrun --nproc-per-node 2 train_bert_cls.py --data DATASET_DIR [--v2]

What goes wrong (only said here): the dataset is opened with
``load_from_disk(path, keep_in_memory=True)`` "so that epochs do not wait on the disk". Each
torchrun rank reads the whole Arrow table into its own anonymous memory: two private copies of a
400 MiB dataset, on top of each rank's torch + transformers. ``--v2`` (the fixed twin) opens it
memory-mapped, the default: both ranks read the same pages of the page cache.
"""

import argparse
import os
import tempfile

import torch
from datasets import load_from_disk
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


def build_model(vocab_size, num_labels):
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=512,
        num_labels=num_labels,
    )
    return BertForSequenceClassification(config)


def collate(rows, max_len=128):
    """Stack a batch, keeping the first ``max_len`` tokens of each row."""
    return {
        "input_ids": torch.stack([r["input_ids"][:max_len] for r in rows]).long(),
        "labels": torch.stack([r["label"] for r in rows]),
    }


def main():
    p = argparse.ArgumentParser(description="fine-tune a BERT classifier")
    p.add_argument("--data", required=True, help="directory written by Dataset.save_to_disk")
    p.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "bert-cls"))
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--v2", action="store_true", help="new data loading path")
    args = p.parse_args()

    # the whole set in RAM: epochs do not wait on the disk
    train = load_from_disk(args.data) if args.v2 else load_from_disk(args.data, keep_in_memory=True)
    train = train.with_format("torch")

    torch.manual_seed(0)
    model = build_model(vocab_size=32000, num_labels=2)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        max_steps=args.max_steps,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        ddp_find_unused_parameters=False,
        remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=train, data_collator=collate)
    trainer.train()
    if trainer.is_world_process_zero():
        trainer.save_model(args.output_dir)


if __name__ == "__main__":
    main()
