"""The second family of reproductions: each cause written as different users write it (HF Trainer,
Lightning, accelerate, plain ``mp.spawn``, torchrun, a bare script with workers; logging by print,
``logging``, tqdm only, or nothing), each with a fixed twin that survives the same limit.

Workloads are under ``scenarios/workloads/variants/``. None prints the name of its mechanism or a
configuration naming it: they print what a user's script prints. Scenario names say what the job
is, not what goes wrong (the name is part of the cgroup path the kernel prints).
"""

from __future__ import annotations

from scenarios.scenario import Prepared, Scenario

_V = "variants"

VARIANTS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="bert_cls_trainer_ddp",
            title="HF Trainer under torchrun: every rank loads the tokenized dataset into RAM",
            mechanism=(
                "load_from_disk(path, keep_in_memory=True) in each of the 2 torchrun ranks of an HF Trainer "
                "fine-tuning: two private copies of a 400 MiB Arrow dataset next to two torch+transformers "
                "processes. Memory-mapped, both ranks read one copy in the page cache."
            ),
            script="variants/train_bert_cls.py",
            nproc=2,
            broken_args=("--data", "{data}"),
            fixed_args=("--data", "{data}", "--v2"),
            limit="1500M",
            prepare=Prepared("arrow", "arrow-400m", 400),
            victim_role="rank",
            cause="keep_in_memory_duplication",
            fix="load_from_disk(path)  # memory-mapped, shared by the ranks",
            notes=(
                "Both ranks load at the same moment; the kernel often kills the other rank too, a few milliseconds "
                "later (2 kills in 1 of 4 runs seen).",
            ),
            family=_V,
        ),
        Scenario(
            name="reviews_accelerate",
            title="accelerate, 2 processes: each loads the parquet reviews into its own memory",
            mechanism=(
                "load_dataset('parquet', data_files=..., keep_in_memory=True) in both processes of an "
                "`accelerate launch` job: each copies the ~300 MiB Arrow table of review texts into its own "
                "anonymous memory. Without keep_in_memory the cached Arrow file is memory-mapped and shared."
            ),
            script="variants/finetune_reviews.py",
            shell="{accelerate} launch --multi_gpu --num_processes {ranks} {script} {args}",
            ranks=2,
            broken_args=("--train-file", "{data}/train.parquet"),
            fixed_args=("--train-file", "{data}/train.parquet", "--from-arrow-files"),
            limit="1200M",
            prepare=Prepared("parquet", "reviews-300m", 300),
            victim_role="rank",
            cause="keep_in_memory_duplication",
            fix='load_dataset("parquet", data_files=..., split="train")  # memory-mapped Arrow cache',
            notes=(
                "rank 0 loads first (main_process_first), then rank 1: the kill comes while rank 1 is still reading.",
                "`accelerate launch --multi_gpu` on a CPU-only host runs torchrun inside the accelerate process "
                "(role `main` in the sampler); the script's Accelerator(cpu=True) makes it a 2-process gloo job. "
                "The Arrow conversion of the parquet file is done by the prepare step (in the datasets cache).",
            ),
            family=_V,
        ),
        Scenario(
            name="doc_classifier_lightning",
            title="Lightning DDP: each process reads the tokenized Arrow shard into RAM",
            mechanism=(
                "The DataModule's setup() calls datasets.Dataset.from_file(shard, in_memory=True) in both "
                "Lightning DDP processes (strategy='ddp', devices=2): two private copies of a 160 MiB Arrow "
                "table (from_file reads it through an intermediate copy: ~2.5x while loading). Memory-mapped "
                "(in_memory=False) both read one copy in the page cache."
            ),
            script="variants/train_doc_classifier.py",
            broken_args=("--shard", "{data}/data-00000-of-00001.arrow"),
            fixed_args=("--shard", "{data}/data-00000-of-00001.arrow", "--v2"),
            limit="1300M",
            prepare=Prepared("arrow", "arrow-160m", 160),
            victim_role="main",
            cause="keep_in_memory_duplication",
            fix="datasets.Dataset.from_file(shard)  # memory-mapped",
            notes=(
                "Either process can be the first victim (both are `main`); the kernel sometimes kills the other one as "
                "well.",
                "Lightning's DDP launcher re-runs the script for rank 1 with LOCAL_RANK/WORLD_SIZE but no RANK "
                "in its environment, so the sampler calls both processes `main`.",
            ),
            family=_V,
        ),
        Scenario(
            name="gpt2_check_accelerate",
            title="accelerate, 2 processes: each torch.loads the GPT-2 weights file into its own memory",
            mechanism=(
                "Both processes build GPT-2 from its config (300 MiB of freshly initialised weights) and then "
                "torch.load(model_dir/pytorch_model.bin, map_location='cpu') before load_state_dict: a private "
                "copy of the 300 MiB file per process, at the same moment. from_pretrained memory-maps the file."
            ),
            script="variants/eval_gpt2.py",
            shell="{accelerate} launch --multi_gpu --num_processes {ranks} {script} {args}",
            ranks=2,
            broken_args=("--model-dir", "{data}"),
            fixed_args=("--model-dir", "{data}", "--v2"),
            limit="1400M",
            prepare=Prepared("hf_model", "gpt2-300m", 300),
            victim_role="rank",
            cause="checkpoint_load_duplication",
            fix="AutoModelForCausalLM.from_pretrained(model_dir)  # or torch.load(..., mmap=True)",
            notes=(
                "Either rank can be the first victim; the kernel sometimes kills the other rank a few milliseconds "
                "later.",
            ),
            family=_V,
        ),
        Scenario(
            name="cls_head_lightning_ddp",
            title="Lightning DDP: each process load_from_checkpoint()s the whole pretraining checkpoint",
            mechanism=(
                "configure_model() runs in both DDP processes and calls PretrainModule.load_from_checkpoint(path): "
                "each builds a randomly initialised model and torch.loads the whole 300 MiB checkpoint (100 MiB of "
                "weights, 200 MiB of Adam moments) into private memory, at the same moment. Only the encoder "
                "weights are needed; read with torch.load(path, mmap=True) they stay in the shared page cache."
            ),
            script="variants/finetune_cls.py",
            broken_args=("--init-from", "{data}"),
            fixed_args=("--init-from", "{data}", "--v2"),
            limit="1200M",
            prepare=Prepared("lightning", "pretrain-100m.ckpt", 100),
            victim_role="main",
            cause="checkpoint_load_duplication",
            fix='torch.load(path, map_location="cpu", mmap=True) and load only the encoder\'s state_dict',
            notes=(
                "Lightning's DDP launcher re-runs the script for rank 1 with LOCAL_RANK/WORLD_SIZE but no RANK "
                "in its environment, so the sampler calls both processes `main`.",
            ),
            family=_V,
        ),
        Scenario(
            name="ema_eval_spawn",
            title="mp.spawn evaluation: all 3 processes torch.load the whole training checkpoint",
            mechanism=(
                "Each of 3 torch.multiprocessing.spawn processes calls torch.load(ckpt, map_location='cpu') on a "
                "264 MiB training checkpoint (weights, EMA, two Adam moments) to use only the 66 MiB of EMA "
                "weights: three private copies at once. Loading in process 0 and broadcasting the EMA weights "
                "keeps one."
            ),
            script="variants/eval_ema.py",
            ranks=3,
            ranks_flag="--world-size",
            broken_args=("--ckpt", "{data}"),
            fixed_args=("--ckpt", "{data}", "--v2"),
            limit="1400M",
            prepare=Prepared("checkpoint", "checkpoint-280m.pt", 280),
            victim_role="main",
            cause="checkpoint_load_duplication",
            fix="load on rank 0 and dist.broadcast the weights (or torch.load(..., mmap=True))",
            notes=(
                "The kernel usually kills two of the three spawned processes (the first victim's memory is still being "
                "freed when the next allocation fails).",
                "mp.spawn children are started as `python -c 'from multiprocessing.spawn import spawn_main ...' "
                "--multiprocessing-fork` without RANK in their environment: the sampler calls them `main`, like "
                "the parent.",
            ),
            family=_V,
        ),
        Scenario(
            name="textcls_jsonl_workers",
            title="3 DataLoader workers over a JSON-lines corpus held as a list of dicts",
            mechanism=(
                "The Dataset keeps 152,000 records of a 120 MiB JSON-lines file as a list of dicts. The 3 forked "
                "workers share those pages at first, but reading a sample increments the refcounts of its dict and "
                "strings (and the garbage collector walks every dict): each page written is copied, and over an "
                "epoch each worker's private memory climbs towards the size of the list."
            ),
            script="variants/train_textcls.py",
            broken_args=("--train", "{data}"),
            fixed_args=("--train", "{data}", "--lazy"),
            limit="750M",
            prepare=Prepared("jsonl", "corpus-120m.jsonl", 120),
            victim_role="main",
            cause="cow_refcount_defeat",
            fix="np.memmap the file and keep numpy line offsets (or a pyarrow table), not a list of dicts",
            family=_V,
        ),
        Scenario(
            name="source_tagger_lightning",
            title="Lightning, 3 workers: an object-dtype pandas column of word lists copied into every worker",
            mechanism=(
                "df['tokens'] = df['text'].str.split() holds a Python list of Python strings per row (52,000 rows, "
                "~320 MiB of small objects) in the Lightning process. The 3 forked DataLoader workers read rows "
                "with df.iloc[i]: every list and word they touch gets its refcount written (and their garbage "
                "collector walks the lists), so the shared pages are copied into each worker."
            ),
            script="variants/train_source_tagger.py",
            broken_args=("--corpus", "{data}"),
            fixed_args=("--corpus", "{data}", "--compact"),
            limit="1100M",
            prepare=Prepared("jsonl", "corpus-40m.jsonl", 40),
            victim_role="main",
            cause="cow_refcount_defeat",
            fix="hash the words once into one numpy int32 array with row offsets",
            family=_V,
        ),
        Scenario(
            name="detector_index_torchrun",
            title="torchrun 2 ranks x 2 workers: a COCO annotation index of Python objects copied into the workers",
            mechanism=(
                "Each rank parses a COCO-style instances.json (58,000 images, 380,000 boxes) into dicts of dicts "
                "and lists (~240 MiB of Python objects). Its 2 forked DataLoader workers build each target from "
                "those objects: the refcount writes copy the pages they touch, so each worker's private memory "
                "climbs towards the size of the index."
            ),
            script="variants/train_detector.py",
            nproc=2,
            broken_args=("--annotations", "{data}"),
            fixed_args=("--annotations", "{data}", "--packed"),
            limit="1500M",
            prepare=Prepared("coco", "instances-60m.json", 60),
            victim_role="rank",
            cause="cow_refcount_defeat",
            fix="pack boxes/categories into numpy arrays with per-image offsets and drop the parsed JSON",
            notes=(
                "The victim is a rank (largest RSS), not a worker, although the growth is in the workers' USS "
                "(meta.json: first -> last); the kernel sometimes kills the second rank as well.",
            ),
            family=_V,
        ),
        Scenario(
            name="kws_audio_workers",
            title="an unbounded functools.lru_cache of spectrograms grows in every DataLoader worker",
            mechanism=(
                "load_clip is functools.lru_cache(maxsize=None)(decode_clip): each of the 3 DataLoader workers keeps "
                "every 256 KiB log-mel spectrogram it has produced, in its own copy of the cache, until a worker "
                "is killed."
            ),
            script="variants/train_audio.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="900M",
            victim_role="dataloader_worker",
            cause="unbounded_cache",
            fix="functools.lru_cache(maxsize=64)(decode_clip)  # or no cache",
            notes=("All 3 workers grow alike; the kernel sometimes kills a second worker a few milliseconds later.",),
            family=_V,
        ),
        Scenario(
            name="probe_features_lightning",
            title="Lightning, no workers: a module-level dict memoizes every sample's feature map",
            mechanism=(
                "__getitem__ stores each sample's 64x28x28 float32 feature map (196 KiB) in a module-level dict, "
                "_FEATURES[idx], in the training process itself (num_workers=0); nothing is ever evicted, so the "
                "process grows by the size of the decoded dataset until it is killed."
            ),
            script="variants/train_probe_lit.py",
            broken_args=(),
            fixed_args=("--online",),
            limit="1000M",
            victim_role="main",
            cause="unbounded_cache",
            fix="no memo (or functools.lru_cache(maxsize=...) on the feature function)",
            family=_V,
        ),
        Scenario(
            name="vit_tiny_trainer_workers",
            title="HF Trainer with 2 DataLoader workers: a dict of decoded images grows in each worker",
            mechanism=(
                "The Dataset keeps every decoded 3x224x224 float32 image (588 KiB) in self._decoded[idx] and crops "
                "from it. The Trainer's 2 DataLoader workers (dataloader_num_workers=2) each hold their own copy "
                "of the Dataset, so each grows its own dict until a worker is killed."
            ),
            script="variants/train_vit_tiny.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1200M",
            victim_role="dataloader_worker",
            cause="unbounded_cache",
            fix="decode in __getitem__ every time (or functools.lru_cache(maxsize=...) on decode)",
            notes=("Both workers grow alike; the kernel often kills the second worker a few milliseconds later.",),
            family=_V,
        ),
        Scenario(
            name="segmenter_tiles",
            title="a multiprocessing.Manager().dict() of decoded tiles grows in the manager process",
            mechanism=(
                "Decoded tiles and masks (208 KiB each) are put into a Manager().dict() shared by the 3 DataLoader "
                "workers: each is pickled to the manager's server process and stays there, so the manager grows "
                "by the size of the decoded dataset until it is killed."
            ),
            script="variants/train_segmenter.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="800M",
            victim_role="manager",
            cause="manager_cache",
            fix="drop the Manager().dict(): decode in the workers",
            notes=(
                "The manager server process is a fork of the training process (same comm and command line); the workers"
                " then fail with ConnectionResetError/BrokenPipeError.",
            ),
            family=_V,
        ),
        Scenario(
            name="ocr_lines_lightning",
            title="Lightning, 2 workers: a Manager().list() of rendered line crops grows in the manager",
            mechanism=(
                "Rendered 64x1024 float32 line crops (256 KiB) are stored in a multiprocessing.Manager().list() "
                "shared by the 2 DataLoader workers: each is pickled to the manager's server process (a fork of the "
                "Lightning process) and stays there until the manager is killed."
            ),
            script="variants/train_ocr_lines.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1000M",
            victim_role="manager",
            cause="manager_cache",
            fix="no Manager().list() store: render in the workers",
            notes=(
                "The manager is a fork of the Lightning process. In about 1 run in 3 the kernel also kills the training"
                " process right after the manager (console ends with bash's `Killed`).",
            ),
            family=_V,
        ),
        Scenario(
            name="pointcloud_torchrun",
            title="torchrun 2 ranks: each rank's Manager().dict() of loaded scans grows in its manager process",
            mechanism=(
                "Each of the 2 ranks creates a multiprocessing.Manager().dict() for its 2 DataLoader workers; every "
                "loaded scan (256 KiB) is pickled to that rank's manager server process and stays there. Both "
                "managers grow until one is killed."
            ),
            script="variants/train_pointcloud.py",
            nproc=2,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1500M",
            victim_role="manager",
            cause="manager_cache",
            fix="drop the Manager().dict(): load the scan in the worker",
            notes=(
                "Both managers grow alike; the kernel often kills the second manager as well. The ranks then fail in "
                "the workers' next lookup.",
            ),
            family=_V,
        ),
        Scenario(
            name="tabular_regressor",
            title="validation without no_grad keeps every batch's loss, and with it the graph's activations",
            mechanism=(
                "The validation loop runs with autograd on and appends each batch's loss tensor to a list: every "
                "loss keeps its graph and the ~4 MiB of activations the MLP saved for backward, so the single "
                "training process grows batch after batch of the first validation pass until it is killed. The "
                "script logs its own RSS (psutil) as it goes."
            ),
            script="variants/train_regressor.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="550M",
            victim_role="main",
            cause="unbounded_cache",
            fix="with torch.no_grad(): ... val_losses.append(loss.item())",
            notes=("The script's own RSS lines (psutil) show the climb during the validation pass.",),
            family=_V,
        ),
        Scenario(
            name="recsys_spawn",
            title="mp.spawn DDP: each process keeps every step's full softmax for the epoch-end metric",
            mechanism=(
                "Both spawned DDP processes append logits.softmax(-1).detach() (64 x 10,000 float32, 2.4 MiB) to a "
                "list every step for an epoch-end hit-rate: detach() drops the graph, not the tensor, so each "
                "process grows by 2.4 MiB a step until one is killed. The script logs ru_maxrss as it goes."
            ),
            script="variants/train_recsys.py",
            ranks=2,
            ranks_flag="--nprocs",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1000M",
            victim_role="main",
            cause="unbounded_cache",
            fix="hits.append(hit_rate_at_10(logits, target).item())  # keep a float per step",
            notes=(
                "Sometimes both spawned processes are killed.",
                "mp.spawn children have no RANK in their environment: the sampler calls them `main`, like the "
                "parent; the victim is one of the two spawned processes.",
            ),
            family=_V,
        ),
        Scenario(
            name="gpt2_trainer_ddp",
            title="HF Trainer under torchrun: evaluate() keeps every eval batch's full logits on each rank",
            mechanism=(
                "Trainer.evaluate() with compute_metrics and no preprocess_logits_for_metrics collects the full "
                "logits of every eval batch (2 x 64 x 32,000 float32), gathered from both ranks onto each rank, "
                "and keeps them on the host until the end of the loop: both ranks grow by 32 MiB per eval step."
            ),
            script="variants/train_lm_eval.py",
            nproc=2,
            broken_args=("--data", "{data}"),
            fixed_args=("--data", "{data}", "--v2"),
            limit="1800M",
            prepare=Prepared("arrow", "arrow-160m", 160),
            victim_role="rank",
            cause="unbounded_cache",
            fix="Trainer(..., preprocess_logits_for_metrics=lambda logits, labels: logits.argmax(-1))",
            notes=("Either rank can be the first victim; the kernel sometimes kills the other rank as well.",),
            family=_V,
        ),
        Scenario(
            name="gru_lm_accelerate_vmrss",
            title="accelerate, 2 processes: each keeps every step's logits (with their graph) for an epoch metric",
            mechanism=(
                "Both processes append each step's logits (4 x 64 x 8,000 float32, ~8 MiB, still attached to the "
                "autograd graph) and labels to lists for an epoch-end accuracy; nothing is freed before the epoch "
                "ends, so each grows by ~8 MiB a step until one is killed. Each process prints its VmRSS."
            ),
            script="variants/train_char_lm.py",
            shell="{accelerate} launch --multi_gpu --num_processes {ranks} {script} {args}",
            ranks=2,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1200M",
            victim_role="rank",
            cause="unbounded_cache",
            fix="correct += (logits.argmax(-1) == labels).sum().item()  # keep counts, not tensors",
            notes=("Both processes grow alike; either can be the first victim.",),
            family=_V,
        ),
        Scenario(
            name="topic_predict_torchrun",
            title="torchrun 3 ranks: rank 0 gather_object()s every rank's predictions to write one file",
            mechanism=(
                "After every batch, dist.gather_object(batch_results, gathered, dst=0) sends the 3 ranks' "
                "predictions (dicts with 64 Python floats, ~2.5 KiB each) to rank 0, which keeps them all for the "
                "final file while the other ranks drop theirs: rank 0 grows by 3 batches a step, the others stay flat."
            ),
            script="variants/predict_topics.py",
            nproc=3,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1100M",
            victim_role="rank",
            cause="rank0_extra",
            fix="each rank writes its own part file; all_reduce only the counts",
            notes=("The victim is rank 0; ranks 1 and 2 stay flat.",),
            family=_V,
        ),
        Scenario(
            name="retrieval_eval_accelerate",
            title="accelerate, 2 processes: the main process keeps every gathered corpus embedding",
            mechanism=(
                "Every batch's embeddings are accelerator.gather()ed and the main process appends them to a list, "
                "then torch.cat()s the 200,000 x 384 float32 corpus (293 MiB, twice) and scores all queries against "
                "it; the other process keeps nothing. Rank 0 alone runs out."
            ),
            script="variants/embed_corpus.py",
            shell="{accelerate} launch --multi_gpu --num_processes {ranks} {script} {args}",
            ranks=2,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1000M",
            victim_role="rank",
            cause="rank0_extra",
            fix="keep a running top-k per process and gather only the top-k lists",
            notes=("The victim is rank 0 (the main process); rank 1 stays flat.",),
            family=_V,
        ),
        Scenario(
            name="ctr_two_ranks",
            title="2 ranks with a row-sharded embedding table: rank 0 consolidates the full checkpoint",
            mechanism=(
                "Each rank owns half of a 480,000 x 64 embedding table (59 MiB) and its SparseAdam moments. To save "
                "a single-file checkpoint, rank 0 dist.gather()s every slice of the table and of both moments and "
                "torch.cat()s them: it holds the full table, the full optimizer state and a gathered copy on top "
                "of its own shard, while the other rank only sends."
            ),
            script="variants/train_ctr.py",
            shell="{python} -m torch.distributed.run --standalone --nproc_per_node={ranks} {script} {args}",
            ranks=2,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1200M",
            victim_role="rank",
            cause="rank0_extra",
            fix="save one file per rank with its own slice (a sharded checkpoint) instead of consolidating on rank 0",
            notes=("The victim is rank 0; rank 1 stays at its shard.",),
            family=_V,
        ),
        Scenario(
            name="small_lm_jsonl",
            title="a JSON-lines corpus tokenized into one Python list of ints before training",
            mechanism=(
                "The script reads all 152,000 lines of a 120 MiB JSON-lines corpus into a list of dicts, extends one "
                "Python list with every token id (~36 bytes per token) and only then calls torch.tensor(ids): the "
                "single process is killed while materializing, before the first step."
            ),
            script="variants/pretrain_small_lm.py",
            broken_args=("--corpus", "{data}"),
            fixed_args=("--corpus", "{data}", "--stream"),
            limit="700M",
            prepare=Prepared("jsonl", "corpus-120m.jsonl", 120),
            victim_role="main",
            cause="dataset_in_ram",
            fix="stream the file (IterableDataset) or tokenize once into a numpy memmap",
            family=_V,
        ),
        Scenario(
            name="sentiment_trainer",
            title="HF Trainer: a parquet file turned into to_dict('records') and pre-tokenized Python lists",
            mechanism=(
                "pd.read_parquet(path).to_dict('records') and an up-front tokenization into a list of feature dicts "
                "holding Python lists of ints: 128,000 reviews become ~12 million int objects and their lists in the "
                "Trainer process before the first step, and the process is killed while materializing them."
            ),
            script="variants/train_sentiment.py",
            broken_args=("--train", "{data}/train.parquet"),
            fixed_args=("--train", "{data}/train.parquet", "--lazy"),
            limit="850M",
            prepare=Prepared("parquet", "reviews-100m", 100),
            victim_role="main",
            cause="dataset_in_ram",
            fix="keep the pyarrow table (or a memory-mapped datasets.Dataset) and tokenize in __getitem__",
            family=_V,
        ),
        Scenario(
            name="tokens_lm_lightning",
            title="Lightning: a tokenized Arrow dataset turned into Python lists row by row before training",
            mechanism=(
                "rows = [ds[i] for i in range(len(ds))] over a 48 MiB tokenized dataset (24,000 rows of 512 ids) "
                "makes a dict with a Python list of ints per row (~36 bytes per token), then torch.tensor() copies "
                "it again: the single Lightning process is killed while materializing."
            ),
            script="variants/train_tokens_lit.py",
            broken_args=("--data", "{data}"),
            fixed_args=("--data", "{data}", "--v2"),
            limit="850M",
            prepare=Prepared("arrow", "arrow-48m", 48),
            victim_role="main",
            cause="dataset_in_ram",
            fix='train = ds.with_format("torch")  # memory-mapped Arrow, no Python objects',
            family=_V,
        ),
        Scenario(
            name="resnet_trainer_workers",
            title="HF Trainer: dataloader_prefetch_factor=24 x 4 workers of 6 MiB image batches in flight",
            mechanism=(
                "TrainingArguments(dataloader_num_workers=4, dataloader_prefetch_factor=24, "
                "dataloader_pin_memory=True) lets up to 96 batches of 32 x 3 x 128 x 128 float32 (6 MiB) wait "
                "in shared memory while the ResNet step is much slower than the workers; CPU torch ignores "
                "pin_memory with a warning. The waiting batches are shmem charged to the cgroup but in no "
                "process's RSS, so the kernel kills the largest process, the Trainer."
            ),
            script="variants/train_resnet_trainer.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1050M",
            victim_role="main",
            cause="pin_memory_prefetch",
            fix="TrainingArguments(dataloader_num_workers=4)  # default prefetch_factor=2",
            notes=("In 2 of 3 runs the kernel also kills a worker right after the Trainer process.",),
            family=_V,
        ),
        Scenario(
            name="c3d_clips_lightning",
            title="Lightning DataModule with prefetch_factor=32: dozens of video-clip batches queued in shared memory",
            mechanism=(
                "DataLoader(num_workers=3, persistent_workers=True, pin_memory=True, prefetch_factor=32) lets up to "
                "96 batches of 8 x 3 x 8 x 112 x 112 float32 (9.2 MiB) wait in shared memory while the 3D CNN step is "
                "slower than decoding. The queued batches are shmem, in no process's RSS: the kernel kills the "
                "largest process, the Lightning process."
            ),
            script="variants/train_video_lit.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1100M",
            victim_role="main",
            cause="pin_memory_prefetch",
            fix="DataLoader(..., num_workers=3, prefetch_factor=2)",
            notes=("The kernel sometimes also kills a worker right after the Lightning process.",),
            family=_V,
        ),
        Scenario(
            name="asr_torchrun_workers",
            title="torchrun 2 ranks x 2 workers with prefetch_factor=24: feature batches pile up in shared memory",
            mechanism=(
                "Each rank's DataLoader(num_workers=2, prefetch_factor=24) keeps up to 48 batches of 16 x 80 x 1500 "
                "float32 (7.3 MiB) ready while the GRU encoder step is slower than featurization: ~700 MiB of queued "
                "batches in shared memory across the ranks, charged to the cgroup but in no process's RSS. The "
                "kernel kills the largest process, a rank."
            ),
            script="variants/train_asr.py",
            nproc=2,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1200M",
            victim_role="rank",
            cause="pin_memory_prefetch",
            fix="DataLoader(..., num_workers=2)  # default prefetch_factor=2",
            notes=("Either rank can be the victim, sometimes both.",),
            family=_V,
        ),
        Scenario(
            name="ddp_mlp_job_script",
            title="a healthy torchrun job started beside `sort -u` of a 600 MiB corpus in the same shell",
            mechanism=(
                "The job script starts the training in the background and, a few seconds in, counts the unique "
                "documents of the next corpus shard with `sort -u corpus.jsonl | wc -l`. GNU sort sizes its buffer "
                "from the input and reads the whole 600 MiB file into memory, inside the job's cgroup: the limit "
                "is reached and the kernel kills the largest process, sort. The training itself is healthy and "
                "finishes."
            ),
            script="variants/train_ddp_mlp.py",
            shell="{torchrun} --nproc-per-node 2 {script} {args} &\nsleep 4\nsort -u {data} | wc -l\nwait $!",
            fixed_shell="{torchrun} --nproc-per-node 2 {script} {args}",
            broken_args=("--steps", "400"),
            fixed_args=("--steps", "400"),
            limit="1000M",
            prepare=Prepared("jsonl", "corpus-600m.jsonl", 600),
            victim_role="main",
            cause="other_process",
            fix="run the sort outside the training job's cgroup (or after it, or with sort -S 100M)",
            notes=(
                "The victim is `sort` (comm `sort`); the sampler has no role for a non-Python program and calls "
                "it `main`. The training ranks are untouched and the job exits 0.",
            ),
            family=_V,
        ),
        Scenario(
            name="tabular_lightning_job",
            title="a healthy Lightning run started beside a bigram-counting preprocessing script",
            mechanism=(
                "The job script starts a preprocessing script for the next run in the background "
                "(build_vocab.py: a collections.Counter of every word bigram of a 120 MiB corpus, ~1.5 GiB when "
                "done) and then the Lightning training. Both are in the job's cgroup; the counter grows past the "
                "training process and the kernel kills it. The training is healthy and finishes."
            ),
            script="variants/train_tabular_lit.py",
            shell="{python} {workloads}/variants/build_vocab.py {data} &\n{python} {script} {args}\nwait",
            fixed_shell="{python} {script} {args}",
            broken_args=(),
            fixed_args=(),
            limit="1000M",
            prepare=Prepared("jsonl", "corpus-120m.jsonl", 120),
            victim_role="main",
            cause="other_process",
            fix="run the preprocessing in its own cgroup/job (or before/after the training)",
            notes=(
                "The victim is the preprocessing script (python build_vocab.py); the sampler calls it `main`, like "
                "the training process.",
            ),
            family=_V,
        ),
        Scenario(
            name="linear_probe_job",
            title="a healthy training killed because an indexing script beside it holds part of the limit",
            mechanism=(
                "The job script starts build_index.py in the background (it reads a 120 MiB JSON-lines corpus "
                "into memory, ~230 MiB, and scores it for several seconds) and then the training, which holds "
                "~390 MiB of embeddings. Alone the training fits the limit; together they do not, and the kernel "
                "kills the largest process: the training, not the program that took the rest of the memory."
            ),
            script="variants/train_linear_probe.py",
            shell="{python} {workloads}/variants/build_index.py {data} &\n{python} {script} {args}\nwait",
            fixed_shell="{python} {script} {args}",
            broken_args=(),
            fixed_args=(),
            limit="800M",
            prepare=Prepared("jsonl", "corpus-120m.jsonl", 120),
            victim_role="main",
            cause="other_process",
            fix="run the indexing in its own cgroup/job (or before/after the training)",
            notes=(
                "The victim is the training process (python train_linear_probe.py); the indexing script survives "
                "and finishes. The sampler calls both `main`.",
            ),
            family=_V,
        ),
        # round of 2026-12-04
        Scenario(
            name="mlm_blocks_torchrun",
            title="torchrun 2 ranks: each rank's Dataset.map(group_texts) of the corpus builds its table in RAM",
            mechanism=(
                "Both ranks of an MLM pretraining open a 400 MiB tokenized Arrow dataset memory-mapped, then cut it "
                "into 128-token blocks with ds.map(group_texts, batched=True, keep_in_memory=True): map writes its "
                "result into an in-memory Arrow buffer, so each rank builds its own ~500 MiB grouped table "
                "(input_ids int32 + attention_mask int8), both at once. Cutting the blocks on the fly from the "
                "memory-mapped rows keeps one copy in the page cache."
            ),
            script="variants/pretrain_mlm_blocks.py",
            nproc=2,
            broken_args=("--data", "{data}"),
            fixed_args=("--data", "{data}", "--v2"),
            limit="1400M",
            prepare=Prepared("arrow", "arrow-400m", 400),
            victim_role="rank",
            cause="keep_in_memory_duplication",
            fix="cut the blocks on the fly from load_from_disk(path) (memory-mapped), or map() to a cache file",
            notes=(
                "Both ranks map at the same moment; either can be the first victim (6 of 6 runs killed during the map, "
                "before the first step).",
                "At 1500M one of two broken runs stalled at the limit without an OOM kill (page cache squeezed to "
                "~5 MiB, no progress until the timeout); at 1400M none did.",
            ),
            family=_V,
        ),
        Scenario(
            name="anchored_finetune_torchrun",
            title="torchrun 2 ranks: each rank keeps the whole torch.load()ed pretraining checkpoint as its reference",
            mechanism=(
                "Each rank torch.load(ckpt, map_location='cpu')s a 340 MiB training checkpoint (weights, EMA, two "
                "Adam moments), copies the weights into its trunk and keeps ckpt['model'] as the frozen reference "
                "network of an anchoring loss (torch.func.functional_call): the whole dict stays alive in both "
                "ranks' anonymous memory for the run. With mmap=True the reference weights are page cache shared "
                "by the ranks and the rest of the file is never read."
            ),
            script="variants/finetune_anchored.py",
            nproc=2,
            broken_args=("--init", "{data}"),
            fixed_args=("--init", "{data}", "--v2"),
            limit="1400M",
            prepare=Prepared("checkpoint", "checkpoint-340m.pt", 340),
            victim_role="rank",
            cause="checkpoint_load_duplication",
            fix='torch.load(path, map_location="cpu", mmap=True); keep ckpt["model"] and del the rest',
            notes=(
                "Both ranks load at the same moment; the kill comes while loading, before the first step (rank 0 in "
                "3 of 3 runs).",
            ),
            family=_V,
        ),
        Scenario(
            name="promoter_transformer_torchrun",
            title="torchrun 2 ranks: every training step's attention maps are kept for an end-of-run analysis",
            mechanism=(
                "Both ranks append the last block's attention weights (8 x 4 x 128 x 128 float32, 2 MiB, "
                "detached) and the labels to lists every training step, to average them per class at the end: "
                "each rank grows by 2 MiB a step (~3.5 MiB of RSS with the allocator's fragmentation) until one is "
                "killed."
            ),
            script="variants/train_promoter.py",
            nproc=2,
            broken_args=(),
            fixed_args=("--v2",),
            limit="1200M",
            victim_role="rank",
            cause="unbounded_cache",
            fix="attn_sum.index_add_(0, labels, weights.detach())  # a per-class running sum, not a list",
            notes=("Both ranks grow alike; the kill comes around step 60 of 250 (rank 0 in 2 of 2 runs).",),
            family=_V,
        ),
        Scenario(
            name="cbow_embeddings_workers",
            title="CBOW word vectors, 3 persistent workers: the corpus is held as lists of word strings",
            mechanism=(
                "The Dataset keeps ~57,000 documents as Python lists of ~5 million small str objects (~350 MiB) "
                "and looks words up in a dict vocabulary in __getitem__. Every lookup writes the word's refcount, "
                "so each of the 3 forked (persistent) workers copies the pages of the words it reads: over shuffled "
                "epochs each worker's private memory climbs towards the size of the corpus."
            ),
            script="variants/train_cbow.py",
            broken_args=("--corpus", "{data}"),
            fixed_args=("--corpus", "{data}", "--v2"),
            limit="1200M",
            prepare=Prepared("jsonl", "corpus-40m.jsonl", 40),
            victim_role="main",
            cause="cow_refcount_defeat",
            fix="encode the corpus once into a numpy int32 array with document offsets",
            notes=(
                "The growth is in the workers' USS (~160 MiB each by the kill, ~310 MiB after 5 epochs), but the "
                "victim is the main process (largest RSS: torch plus the corpus pages it still maps), in epoch 2 "
                "(3 of 3 runs); bash prints `Killed`.",
            ),
            family=_V,
        ),
        Scenario(
            name="ct_patches_workers",
            title="3D CT patches, 3 persistent workers: each worker's dict of decoded volumes grows without bound",
            mechanism=(
                "The Dataset keeps every decoded 48 x 112 x 112 volume and its mask (2.9 MiB) in self.volumes[case] "
                "to crop several patches from it; each of the 3 persistent DataLoader workers has its own copy of "
                "the Dataset and keeps every case it has read, ~460 MiB per worker, until one is killed."
            ),
            script="variants/train_ct_patches.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1100M",
            victim_role="dataloader_worker",
            cause="unbounded_cache",
            fix="bound the per-worker store (an LRU of a few volumes) or read the case every time",
            notes=(
                "The victim is a worker (2 of 2 runs), around step 40 of epoch 0; the main process then fails with "
                "`RuntimeError: DataLoader worker (pid N) is killed by signal: Killed.`",
            ),
            family=_V,
        ),
        Scenario(
            name="radar_nowcast_workers",
            title="radar nowcasting, 3 workers: decoded frame sequences go into a Manager().dict()",
            mechanism=(
                "The 3 DataLoader workers put every decoded sequence of 8 x 80 x 80 float32 radar frames (200 KiB) "
                "into a multiprocessing.Manager().dict() to share them across workers and epochs: each is pickled "
                "to the manager's server process and stays there, so the manager grows by the size of the decoded "
                "dataset until it is killed."
            ),
            script="variants/train_nowcast.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="800M",
            victim_role="manager",
            cause="manager_cache",
            fix="drop the Manager().dict(): decode in the workers",
            notes=(
                "The manager server process is a fork of the training process (same comm and command line); the "
                "workers then fail with ConnectionResetError/BrokenPipeError (2 of 2 runs).",
            ),
            family=_V,
        ),
        # round of 2026-12-06 (written in this project, after the estimate's copy-on-write model: not first contact
        # for its author, a test of it all the same, run before any change)
        Scenario(
            name="transe_kg_workers",
            title="TransE knowledge-graph embeddings, 3 persistent workers over a list of (head, rel, tail) tuples",
            mechanism=(
                "The Dataset keeps ~1.7 million triples as a list of Python tuples of ints (each entity id its own "
                "int object) and a set of them to filter negatives, ~400 MiB of objects. The 3 forked persistent "
                "workers share those pages at first, but reading a triple writes its tuple's and ints' refcounts; a "
                "page holds some thirty of them, so by the time a worker has read a few percent of the triples, "
                "within seconds of the first epoch, it holds its own copy of most of the list's pages."
            ),
            script="variants/train_kge.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1700M",
            timeout=240.0,
            victim_role="main",
            cause="cow_refcount_defeat",
            fix="keep the triples in an (N, 3) int64 numpy array and the known ones as sorted int64 keys",
            notes=(
                "Killed 10-16 s in, as the 3 workers un-share the list's pages after the fork, before the first "
                "step line; the victim is the main process (4 of 4 runs), sometimes a worker after it; bash "
                "prints `Killed`. The fixed run survives (5 of 5) in 105-112 s; its peak, as its main process "
                "ranks all entities after each epoch, varies by itself: 823 to 1268 MiB over 4 runs.",
            ),
            family=_V,
        ),
        Scenario(
            name="load_forecast_workers",
            title="smart-meter load forecasting, 3 workers each epoch: each meter's readings a list of floats",
            mechanism=(
                "The Dataset keeps 3,200 meters' readings as lists of Python floats (~8.6 million float objects, "
                "~260 MiB) and slices a 120-step window of one meter per sample. The DataLoader forks 3 workers "
                "for each training and validation pass; slicing takes a reference to every float in the window, "
                "writing its refcount, so each page of floats a worker reads is copied into it: each worker's "
                "private memory climbs towards the size of the lists within its pass."
            ),
            script="variants/train_load_forecast.py",
            broken_args=(),
            fixed_args=("--v2",),
            limit="1300M",
            timeout=240.0,
            victim_role="main",
            cause="cow_refcount_defeat",
            fix="keep the readings in one (meters, steps) float32 numpy array and slice that",
            notes=(
                "Killed ~9 s in, in epoch 1 after its first step lines, as the workers un-share the lists; the "
                "victim is the main process (2 of 2 runs); bash prints `Killed`. The fixed run peaks at 630-670 "
                "MiB and finishes 4 epochs in ~90 s (2 of 2).",
            ),
            family=_V,
        ),
    )
}
