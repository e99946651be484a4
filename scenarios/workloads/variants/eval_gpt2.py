"""Sanity-check a converted GPT-2 checkpoint directory (config.json + pytorch_model.bin) on 2 processes.

The loss of an untrained-looking model on uniform random tokens should be close to ln(vocab); each
process scores its share of the probe batches and the losses are gathered with accelerate.

    accelerate launch --multi_gpu --num_processes 2 eval_gpt2.py --model-dir MODEL_DIR [--v2]

What goes wrong (only said here): every process builds the model from its config and then reads the
weights with ``torch.load(model_dir/pytorch_model.bin, map_location="cpu")`` before
``load_state_dict``: both processes hold a freshly initialised 300 MiB model plus a private 300 MiB
copy of the file at the same moment. The fixed twin (``--v2``) calls
``AutoModelForCausalLM.from_pretrained(model_dir)``, which memory-maps the file: the weights stay in
the page cache, shared by the processes, and nothing is initialised twice.
"""

import argparse
import math
import os

import torch
from accelerate import Accelerator
from transformers import AutoConfig, AutoModelForCausalLM


def load_model(model_dir, v2):
    if v2:
        return AutoModelForCausalLM.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    state = torch.load(os.path.join(model_dir, "pytorch_model.bin"), map_location="cpu")
    model.load_state_dict(state)
    return model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    accelerator = Accelerator(cpu=True)
    accelerator.print(f"loading {args.model_dir}")
    model = load_model(args.model_dir, args.v2).eval()
    vocab = model.config.vocab_size

    g = torch.Generator().manual_seed(1234)
    probe = torch.randint(0, vocab, (args.batches, args.batch_size, args.seq_len), generator=g)
    losses = []
    with torch.no_grad():
        for i in range(accelerator.process_index, args.batches, accelerator.num_processes):
            losses.append(model(input_ids=probe[i], labels=probe[i]).loss)
            accelerator.print(f"batch {i:2d}  loss {losses[-1].item():.3f}")
    mean = accelerator.gather(torch.stack(losses)).mean().item()
    accelerator.print(f"mean loss {mean:.3f} (ln vocab = {math.log(vocab):.3f}), ppl {math.exp(mean):.0f}")


if __name__ == "__main__":
    main()
