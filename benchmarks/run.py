"""Benchmarks: tfcourse against torch.nn.Transformer, and the key/value cache.

    python benchmarks/run.py            # all three, about 7 minutes on a 2-core CPU
    python benchmarks/run.py --quick    # fewer repeats, a rough look
    python benchmarks/run.py --only throughput --only cache

1. Copy task (vocabulary 11, length 10): wall time until greedy exact match on the
   validation split reaches 100%, tfcourse.Transformer vs torch.nn.Transformer of the same
   size, both trained by tfcourse.training.train with the course's recipe for the task, the
   same data and seeds. The time includes the validation rounds (greedy decoding: tfcourse's
   uses its key/value cache, torch.nn.Transformer has none).
2. Training throughput in tokens/s (source + target tokens through forward, backward and
   an Adam step), same configuration for both.
3. Greedy decoding of 256 tokens (16 sources) with and without the key/value cache.

Timings are medians of interleaved repeats; other work on the machine shows in the
figures, so the load average is printed with them.
"""

import argparse
import os
import platform
import statistics
import sys
import time
import warnings

import torch
from torch import nn

from tfcourse.cli import TASK_DEFAULTS
from tfcourse.data import BOS, PAD, copy_task
from tfcourse.decoding import greedy_decode
from tfcourse.encoder import Embeddings
from tfcourse.masks import causal_mask, padding_mask, target_mask
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.positional import PositionalEncoding
from tfcourse.training import TrainConfig, train


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with tfcourse's embeddings, positions and output layer, and the
    interface tfcourse.training and tfcourse.decoding use (encode, decode, generator,
    init_cache, config). Post-norm without the final LayerNorms, as the paper and tfcourse."""

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.src_embed = Embeddings(c.src_vocab_size, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else Embeddings(c.tgt_vocab_size, c.d_model)
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.transformer = nn.Transformer(
            c.d_model, c.n_heads, c.n_layers, c.n_layers, c.d_ff, c.dropout, c.activation,
            batch_first=True, norm_first=c.norm_first,
        )
        if not c.norm_first:
            self.transformer.encoder.norm = self.transformer.decoder.norm = nn.Identity()
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if c.tie_output:
            self.generator.weight = self.tgt_embed.embedding.weight

    def encode(self, src, src_mask):
        # torch's masks: True = blocked. src_mask (batch, 1, 1, src_len) -> (batch, src_len)
        x = self.positional(self.src_embed(src))
        return self.transformer.encoder(x, src_key_padding_mask=~src_mask[:, 0, 0])

    def decode(self, tgt, memory, src_mask, tgt_mask, cache=None):
        """tgt_mask is rebuilt from the ids (causal, and padding on the keys). nn.Transformer
        has no key/value cache: a cache here keeps the tokens and everything is recomputed."""
        if cache is not None:
            new = tgt.size(1)
            tgt = cache.tokens = tgt if cache.tokens is None else torch.cat((cache.tokens, tgt), 1)
        y = self.positional(self.tgt_embed(tgt))
        h = self.transformer.decoder(
            y, memory, tgt_mask=~causal_mask(tgt.size(1), tgt.device),
            tgt_key_padding_mask=tgt == self.config.pad_id,
            memory_key_padding_mask=~src_mask[:, 0, 0],
        )
        return h if cache is None else h[:, -new:]

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))

    def init_cache(self):
        return TokenCache()


class TokenCache:
    """The decoded tokens so far (all nn.Transformer can keep between steps)."""

    def __init__(self):
        self.tokens = None

    def __len__(self):
        return 0 if self.tokens is None else self.tokens.size(1)

    def reorder(self, index):
        self.tokens = self.tokens.index_select(0, index)


def build(kind, config, seed=0):
    torch.manual_seed(seed)
    return (Transformer if kind == "tfcourse" else TorchTransformer)(config)


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def copy_task_time(seeds):
    """Seconds and steps until 100% greedy exact match on the copy task's validation split.
    Both models train with the course's copy recipe (TASK_DEFAULTS, as notebook 07 and
    `tfcourse train --task copy`), validated every 25 steps. A seed where a model is not at
    100% when the recipe's steps run out is a miss: it is counted, and the means are taken
    over the seeds where both models got there.

    Returns ({model: (mean seconds, mean steps)}, number of seeds in the means,
    {model: misses})."""
    task = copy_task(seed=0, n_train=20_000, n_val=200, n_test=200)
    config = TransformerConfig.tiny(len(task.vocab), **TASK_DEFAULTS["copy"]["model"])
    runs = {"tfcourse": {}, "torch.nn": {}}
    for seed in range(seeds):
        train_config = TrainConfig(**{**TASK_DEFAULTS["copy"]["train"], "eval_every": 25,
                                      "eval_size": 200, "seed": seed})
        for kind, results in runs.items():  # interleaved, so that a busy moment hits both
            model = build(kind, config, seed)
            start = time.perf_counter()
            history = train(model, task, train_config, device="cpu", progress=False, stop_at=1.0)
            seconds = time.perf_counter() - start
            steps, accuracy = history["val_step"][-1], history["val_accuracy"][-1]
            results[seed] = (seconds, steps) if accuracy == 1.0 else None
            print(f"  copy task, seed {seed}, {kind}: {seconds:.1f} s, {steps} steps"
                  + ("" if accuracy == 1.0 else f", missed: {accuracy:.1%} at the end"), flush=True)
    both = [seed for seed in range(seeds) if all(results[seed] for results in runs.values())]
    if not both:
        raise RuntimeError("no seed took both models to 100%")
    means = {kind: tuple(statistics.mean(results[seed][i] for seed in both) for i in (0, 1))
             for kind, results in runs.items()}
    misses = {kind: sum(r is None for r in results.values()) for kind, results in runs.items()}
    return means, len(both), misses


def throughput(repeats, batch=32, seq=32, steps=10):
    """Training tokens per second (source + target) of both models, same configuration."""
    config = TransformerConfig(32, 32, d_model=256, n_heads=8, d_ff=1024, n_layers=2,
                               dropout=0.1, max_len=512)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 32, (batch, seq), generator=g)
    tgt = torch.randint(4, 32, (batch, seq + 1), generator=g)
    src[: batch // 4, -seq // 4:] = PAD  # some padding, as in real batches
    tgt[: batch // 4, -seq // 4:] = PAD
    tgt[:, 0] = BOS
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt_in, PAD)
    runs = {}
    for kind in ("tfcourse", "torch.nn"):
        model = build(kind, config).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)  # as train()

        def run(model=model, optimizer=optimizer):
            for _ in range(steps):
                logits = model(src, tgt_in, src_mask, tgt_mask)
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(),
                                                   ignore_index=PAD)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        run()  # warm-up
        runs[kind] = run
    times = {kind: [] for kind in runs}
    for _ in range(repeats):
        for kind, run in runs.items():
            times[kind].append(median_time(run, 1))
    tokens = steps * (src.numel() + tgt_in.numel())
    return {kind: tokens / statistics.median(t) for kind, t in times.items()}


def kv_cache_speedup(repeats, n_tokens=256, batch=16):
    """Seconds to decode n_tokens greedily for `batch` sources, with and without the cache."""
    config = TransformerConfig.tiny(32, d_model=128, n_heads=4, d_ff=512, n_layers=2,
                                    dropout=0.0)
    model = build("tfcourse", config).eval()
    src = torch.randint(4, 32, (batch, 32), generator=torch.Generator().manual_seed(0))
    src_mask = padding_mask(src, PAD)
    # eos_id=-1 is never produced: every run decodes all n_tokens
    runs = {use: (lambda use=use: greedy_decode(model, src, src_mask, n_tokens, BOS, -1,
                                                use_cache=use)) for use in (True, False)}
    assert torch.equal(runs[True](), runs[False]()) and runs[True]().size(1) == n_tokens  # + warm-up
    times = {use: [] for use in runs}
    for _ in range(repeats):
        for use, run in runs.items():
            times[use].append(median_time(run, 1))
    return {use: statistics.median(t) for use, t in times.items()}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat of each, a rough look")
    parser.add_argument("--seeds", type=int, default=None,
                        help="copy task: seeds to average over (default 20, 2 with --quick)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--only", choices=("copy", "throughput", "cache"), action="append",
                        help="run only this benchmark (may be repeated)")
    args = parser.parse_args(argv)
    parts = args.only or ("copy", "throughput", "cache")
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = 1 if args.quick else 3
    print(f"machine : {cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"versions: python {platform.python_version()}, torch {torch.__version__}")
    print(f"threads : torch {torch.get_num_threads()} (intra-op), {torch.get_num_interop_threads()} "
          f"(inter-op); load average before {os.getloadavg()[0]:.1f}")
    print(f"repeats : {repeats} (medians of timings)\n", flush=True)

    rows = []
    if "copy" in parts:
        # Steps to 100% vary by about +-10% with the seed for both models: 20 seeds take the
        # mean to about +-2%.
        seeds = args.seeds or (2 if args.quick else 20)
        means, n, misses = copy_task_time(seeds)
        cells = [f"{seconds:.1f} s ({steps:.0f} steps)" + (f", {misses[kind]} missed" if misses[kind] else "")
                 for kind, (seconds, steps) in means.items()]
        rows.append((f"copy task: seconds to 100% exact match (mean of {n} seeds)", *cells,
                     means["tfcourse"][0] / means["torch.nn"][0], "<= 1.0"))
        print(*rows[-1][:3], flush=True)
    if "throughput" in parts:
        tokens = throughput(repeats)
        rows.append(("training throughput, tokens/s", f"{tokens['tfcourse']:,.0f}",
                     f"{tokens['torch.nn']:,.0f}", tokens["tfcourse"] / tokens["torch.nn"], ">= 0.9"))
        print(*rows[-1][:3], flush=True)
    if "cache" in parts:
        seconds = kv_cache_speedup(repeats)
        rows.append(("greedy decoding, 16 x 256 tokens (tfcourse)", f"{seconds[True]:.2f} s cached",
                     f"{seconds[False]:.2f} s uncached", seconds[False] / seconds[True], "speed-up"))

    print(f"\nload average after: {os.getloadavg()[0]:.1f}\n")
    table = [("benchmark", "tfcourse", "torch.nn / other", "ratio", "goal")]
    table += [(*row[:3], f"{row[3]:.2f}", row[4]) for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("| " + " | ".join("-" * w for w in widths) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
