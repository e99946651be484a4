"""Train a small GPT-2 (built from a config) on a tokenized dataset with the HF Trainer under torchrun,
then evaluate next-token accuracy with ``compute_metrics``.

    torchrun --nproc-per-node 2 train_lm_eval.py --data DATASET_DIR [--v2]

Nothing is printed but what the Trainer prints (progress bars, the loss and metrics dicts).

What goes wrong (only said here): ``Trainer.evaluate()`` collects the model's outputs for
``compute_metrics``: without ``preprocess_logits_for_metrics`` that is the full logits of every eval
batch (2 x 64 x 32,000 float32, 16 MiB), gathered from both ranks onto each rank at every step, and
kept on the host until the end of the eval loop. Both ranks grow by 32 MiB per eval step until one is
killed. The fixed twin (``--v2``) passes ``preprocess_logits_for_metrics`` returning
``logits.argmax(-1)``.
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from datasets import load_from_disk
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SEQ = 64


def collate(rows):
    ids = torch.stack([r["input_ids"][:SEQ] for r in rows]).long()
    return {"input_ids": ids, "labels": ids.clone()}


def compute_metrics(pred):
    logits_or_ids, labels = pred.predictions, pred.label_ids
    ids = logits_or_ids if logits_or_ids.ndim == 2 else logits_or_ids.argmax(-1)
    return {"token_acc": float(np.mean(ids[:, :-1] == labels[:, 1:]))}


def argmax_logits(logits, labels):
    return logits.argmax(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--train-steps", type=int, default=20)
    p.add_argument("--eval-size", type=int, default=96)
    p.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "lm-eval"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    ds = load_from_disk(args.data).with_format("torch")
    n_train = len(ds) - args.eval_size
    train, held_out = ds.select(range(n_train)), ds.select(range(n_train, len(ds)))
    config = GPT2Config(
        vocab_size=32000, n_positions=SEQ, n_embd=64, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=2,
        max_steps=args.train_steps,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=held_out,
        data_collator=collate,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=argmax_logits if args.v2 else None,
    )
    trainer.train()
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
