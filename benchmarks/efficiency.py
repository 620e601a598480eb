"""Benchmarks of chapter 10: the fused attention path and tiled attention.

    python benchmarks/efficiency.py             # all three, about a minute on a 2-core CPU
    python benchmarks/efficiency.py --quick     # fewer rounds, a rough look

1. Multi-head attention, forward + backward on (8, 256, 256) with 8 heads: tfcourse's
   MultiHeadAttention(attn_impl="sdpa") against torch.nn.MultiheadAttention (time ratio).
2. Training throughput (forward, backward, Adam step) of tfcourse.Transformer with the fused
   path against torch.nn.Transformer of the same size (tokens/s ratio).
3. Peak memory of tiled attention (blocks of 128) at n = 4,096 against chapter 01's
   attention (tfcourse.efficiency.PeakMemory: tensor bytes, the same on every run).

Each timing ratio is the median over rounds of the ratio within one round, the two functions
run back to back, so that other work on the machine hits both alike. A load average above
the number of cores during the run is reported: its timings are then unreliable.
"""

import argparse
import os
import statistics
import sys

import torch
from run import TorchTransformer, cpu_name  # benchmarks/run.py: torch.nn.Transformer, same interface
from torch import nn

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.data import BOS, PAD
from tfcourse.efficiency import PeakMemory, tiled_attention, timings
from tfcourse.masks import padding_mask, target_mask
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.multi_head import MultiHeadAttention


def median_ratio(times, a, b):
    """Median over rounds of times[a][round] / times[b][round]."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def fused_attention(rounds, batch=8, seq=256, d_model=256, heads=8):
    """Seconds of forward + backward: tfcourse's fused MultiHeadAttention and torch.nn's.
    Returns (median seconds ours, median seconds torch.nn, median per-round ratio)."""
    torch.manual_seed(0)
    x = torch.randn(batch, seq, d_model, requires_grad=True)
    ours = MultiHeadAttention(d_model, heads, attn_impl="sdpa")
    theirs = nn.MultiheadAttention(d_model, heads, batch_first=True)
    times = timings({
        "tfcourse": lambda: ours(x, x, x)[0].sum().backward(),
        "torch.nn": lambda: theirs(x, x, x, need_weights=False)[0].sum().backward(),
    }, repeats=rounds)
    return (statistics.median(times["tfcourse"]), statistics.median(times["torch.nn"]),
            median_ratio(times, "tfcourse", "torch.nn"))


def training_throughput(rounds, batch=32, seq=32, steps=5):
    """Training tokens/s (source + target) of tfcourse.Transformer with attn_impl="sdpa" and
    torch.nn.Transformer, same configuration as benchmarks/run.py's throughput. Returns
    (median tokens/s ours, median tokens/s torch.nn, median per-round ratio ours / theirs)."""
    config = TransformerConfig(32, 32, d_model=256, n_heads=8, d_ff=1024, n_layers=2,
                               dropout=0.1, max_len=512, attn_impl="sdpa")
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 32, (batch, seq), generator=g)
    tgt = torch.randint(4, 32, (batch, seq + 1), generator=g)
    src[: batch // 4, -seq // 4:] = PAD  # some padding, as in real batches
    tgt[: batch // 4, -seq // 4:] = PAD
    tgt[:, 0] = BOS
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt_in, PAD)
    runs = {}
    for name, cls in (("tfcourse", Transformer), ("torch.nn", TorchTransformer)):
        torch.manual_seed(0)
        model = cls(config).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)

        def run(model=model, optimizer=optimizer):
            for _ in range(steps):
                logits = model(src, tgt_in, src_mask, tgt_mask)
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(),
                                                   ignore_index=PAD)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        runs[name] = run
    times = timings(runs, repeats=rounds)
    tokens = steps * (src.numel() + tgt_in.numel())
    return (tokens / statistics.median(times["tfcourse"]), tokens / statistics.median(times["torch.nn"]),
            median_ratio(times, "torch.nn", "tfcourse"))  # a time ratio inverted: tokens/s


def tiled_memory(n=4096, d=64, block_size=128):
    """Peak bytes of tensors of tiled attention and of chapter 01's, forward pass, one head.
    Returns (tiled, reference, ratio)."""
    x = torch.randn(1, 1, n, d, generator=torch.Generator().manual_seed(0))
    peaks = []
    with torch.no_grad():
        for fn in (lambda: tiled_attention(x, x, x, block_size=block_size),
                   lambda: scaled_dot_product_attention(x, x, x)):
            with PeakMemory() as memory:
                fn()
            peaks.append(memory.peak)
    return (*peaks, peaks[0] / peaks[1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 21")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = 5 if args.quick else 21
    cores = os.cpu_count()
    load_before = os.getloadavg()[0]
    print(f"machine : {cpu_name()}, {cores} cores; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {rounds} rounds; load average {load_before:.1f}\n")
    rows = []
    ours, theirs, ratio = fused_attention(rounds)
    rows.append(("fused multi-head attention, forward + backward, (8, 256, 256), 8 heads",
                 f"{ours * 1e3:.1f} ms", f"{theirs * 1e3:.1f} ms", ratio, "<= 1.0"))
    ours, theirs, ratio = training_throughput(rounds)
    rows.append(("training throughput with attn_impl='sdpa', tokens/s", f"{ours:,.0f}",
                 f"{theirs:,.0f}", ratio, ">= 1.0"))
    tiled, reference, ratio = tiled_memory()
    rows.append(("tiled attention, peak memory at n = 4,096 (reference: chapter 01's)",
                 f"{tiled / 2**20:.1f} MiB", f"{reference / 2**20:.1f} MiB", ratio, "<= 0.1"))
    load_after = os.getloadavg()[0]

    table = [("benchmark", "tfcourse", "torch.nn / other", "ratio", "goal")]
    table += [(*row[:3], f"{row[3]:.2f}", row[4]) for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("| " + " | ".join("-" * w for w in widths) + " |")
    print(f"\nload average: {load_before:.1f} before, {load_after:.1f} after, on {cores} cores")
    if max(load_before, load_after) > cores:
        print("the machine was busy with other work: the timing ratios are unreliable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
