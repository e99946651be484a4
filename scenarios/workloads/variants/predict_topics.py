"""Batch inference with torchrun (3 ranks): score every document against 64 topics and write the
predictions (id, top topic, the 64 scores) to one JSON-lines file at the end.

    torchrun --nproc-per-node 3 predict_topics.py --docs 240000 --out preds.jsonl [--v2]

Each rank scores its shard of the documents batch by batch (features are synthesized from the
document id here, a stand-in for an encoder's output). Plain ``print`` on each rank.

What goes wrong (only said here): after every batch the ranks send their predictions to rank 0
with ``dist.gather_object(batch_results, gathered, dst=0)``; rank 0 keeps all of them for the
final file, the other ranks drop theirs. Each result is a dict with a list of 64 Python floats
(~2.5 KiB), so rank 0 grows by three batches' worth per step while the other ranks stay flat:
rank 0 alone runs out. The fixed twin (``--v2``) has every rank append its own predictions to its
own part file (``preds.jsonl.rank{N}``) as it goes and only reduces the counts.
"""

import argparse
import contextlib
import json
import os
import tempfile

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--docs", type=int, default=240_000)
    p.add_argument("--topics", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "preds.jsonl"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    head = torch.nn.Linear(256, args.topics).eval()
    mine = range(rank, args.docs, world)
    print(f"[rank {rank}] scoring {len(mine)} documents", flush=True)

    all_results = []
    part_file = open(f"{args.out}.rank{rank}", "w") if args.v2 else contextlib.nullcontext()  # noqa: SIM115
    with part_file as part, torch.no_grad():
        for n, start in enumerate(range(0, len(mine), args.batch_size)):
            ids = list(mine[start : start + args.batch_size])
            g = torch.Generator().manual_seed(ids[0])
            scores = head(torch.randn(len(ids), 256, generator=g)).softmax(-1)
            batch_results = []
            for doc, row in zip(ids, scores.tolist(), strict=True):
                top = max(range(len(row)), key=row.__getitem__)
                batch_results.append({"id": f"doc-{doc:08d}", "topic": top, "scores": [round(s, 5) for s in row]})
            if args.v2:
                part.writelines(json.dumps(r) + "\n" for r in batch_results)
            else:
                gathered = [None] * world if rank == 0 else None
                dist.gather_object(batch_results, gathered, dst=0)
                if rank == 0:
                    for chunk in gathered:
                        all_results.extend(chunk)
            if rank == 0 and n % 10 == 0:
                print(f"[rank 0] batch {n} ({start + len(ids)}/{len(mine)})", flush=True)

    if args.v2:
        count = torch.tensor([len(mine)])
        dist.all_reduce(count)
        if rank == 0:
            print(f"[rank 0] wrote {int(count)} predictions to {args.out}.rank*", flush=True)
    elif rank == 0:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in all_results)
        print(f"[rank 0] wrote {len(all_results)} predictions to {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
