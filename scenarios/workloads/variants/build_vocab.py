"""Count word bigrams over a JSON-lines corpus to pick the vocabulary of the next run.

    python build_vocab.py corpus.jsonl --out vocab.tsv --top 50000

A preprocessing script, run by hand or from the job script; it keeps every bigram it has seen in a
``collections.Counter`` until the end, then writes the most frequent ones.
"""

import argparse
import json
import os
import tempfile
from collections import Counter


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "vocab.tsv"))
    p.add_argument("--top", type=int, default=50_000)
    args = p.parse_args()

    counts = Counter()
    with open(args.corpus) as f:
        for n, line in enumerate(f, 1):
            words = json.loads(line)["text"].split()
            counts.update(zip(words, words[1:], strict=False))
            if n % 50_000 == 0:
                print(f"build_vocab: {n} documents, {len(counts)} bigrams", flush=True)
    with open(args.out, "w") as f:
        for (a, b), c in counts.most_common(args.top):
            f.write(f"{a} {b}\t{c}\n")
    print(f"build_vocab: wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
