"""Build a small search index (document frequencies and the top terms of each document) over a
JSON-lines corpus, for the retrieval demo.

    python build_index.py corpus.jsonl --out index.jsonl

Reads the whole corpus into memory first, then scores every document by tf-idf.
"""

import argparse
import json
import math
import os
import tempfile
from collections import Counter


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "index.jsonl"))
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()

    with open(args.corpus) as f:
        docs = [json.loads(line) for line in f]
    print(f"build_index: {len(docs)} documents loaded", flush=True)
    df = Counter()
    for d in docs:
        df.update(set(d["text"].split()))
    n = len(docs)
    with open(args.out, "w") as out:
        for i, d in enumerate(docs):
            tf = Counter(d["text"].split())
            top = sorted(tf, key=lambda w: tf[w] * math.log(n / df[w]), reverse=True)[: args.top]
            out.write(json.dumps({"id": d["id"], "terms": top}) + "\n")
            if (i + 1) % 50_000 == 0:
                print(f"build_index: scored {i + 1}/{n}", flush=True)
    print(f"build_index: wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
