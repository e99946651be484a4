"""Retrieval evaluation with accelerate (2 CPU processes): embed a document corpus with a small
encoder and report recall@10 for a set of queries whose relevant document is known.

    accelerate launch --multi_gpu --num_processes 2 embed_corpus.py --docs 200000 [--v2]

Documents are synthetic token bags (a stand-in for a tokenized corpus). Logging with ``logging``
(timestamps) through accelerate's logger, main process only.

What goes wrong (only said here): after every batch the embeddings are gathered with
``accelerator.gather`` and the main process keeps all of them (``all_embs.append(...)``), then
concatenates them to score the queries against the whole corpus: rank 0 ends up holding the corpus
embeddings twice (200,000 x 384 float32 = 293 MiB, list + ``torch.cat``) while the other process
stays flat. The fixed twin (``--v2``) keeps a running top-10 per query on each process and merges
the two small top-10 lists at the end.
"""

import argparse
import logging

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s - %(message)s", level=logging.INFO)
logger = get_logger("embed_corpus")
VOCAB, DIM, K = 30000, 384, 10


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(VOCAB, DIM, mode="mean")
        self.proj = torch.nn.Linear(DIM, DIM)

    def forward(self, ids):
        return torch.nn.functional.normalize(self.proj(self.bag(ids)), dim=-1)


def doc_tokens(doc_ids):
    g = torch.Generator().manual_seed(int(doc_ids[0]))
    return torch.randint(0, VOCAB, (len(doc_ids), 32), generator=g)


def merge_topk(scores, ids, new_scores, new_ids):
    s, i = torch.cat([scores, new_scores], 1), torch.cat([ids, new_ids], 1)
    top = s.topk(K, dim=1)
    return top.values, i.gather(1, top.indices)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--docs", type=int, default=200_000)
    p.add_argument("--queries", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=2000)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    torch.manual_seed(0)
    encoder = Encoder().eval()
    relevant = torch.randint(0, args.docs, (args.queries,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        queries = encoder(torch.cat([doc_tokens([d]) for d in relevant.tolist()]))

    all_embs = []
    best_s = torch.full((args.queries, K), -2.0)
    best_i = torch.zeros((args.queries, K), dtype=torch.long)
    starts = range(rank * args.batch_size, args.docs, world * args.batch_size)
    with torch.no_grad():
        for step, start in enumerate(starts):
            doc_ids = torch.arange(start, min(start + args.batch_size, args.docs))
            emb = encoder(doc_tokens(doc_ids))
            if args.v2:
                top = (queries @ emb.T).topk(K, dim=1)
                best_s, best_i = merge_topk(best_s, best_i, top.values, doc_ids[top.indices])
            else:
                gathered = accelerator.gather(emb)
                if accelerator.is_main_process:
                    all_embs.append(gathered)
            if step % 10 == 0:
                logger.info(f"embedded {min((step + 1) * world * args.batch_size, args.docs)}/{args.docs} documents")

    if args.v2:
        best_s, best_i = accelerator.gather(best_s[None]), accelerator.gather(best_i[None])
        top = best_s.permute(1, 0, 2).reshape(args.queries, -1).topk(K, dim=1)
        found = best_i.permute(1, 0, 2).reshape(args.queries, -1).gather(1, top.indices)
    elif accelerator.is_main_process:
        corpus = torch.cat(all_embs)  # gathered batches are in document order
        found = (queries @ corpus.T).topk(K, dim=1).indices
    if accelerator.is_main_process:
        recall = (found == relevant[:, None]).any(1).float().mean().item()
        logger.info(f"recall@{K}: {recall:.4f}")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
