"""Benchmarks of chapter 10: the fused attention path, tiled attention and local attention. They are rows of
benchmarks/run.py (its last block), measured as every row is: for each seed the two sides run
back to back, and the row reports the median of the per-seed ratios.

    python benchmarks/efficiency.py             # the five rows, about 3 minutes on a 2-core CPU
    python benchmarks/efficiency.py --quick     # one pair each, a rough look
    python benchmarks/run.py --only fused       # one of them (fused, fused_throughput, tiled,
                                                # local_memory, local_time)

1. fused: multi-head attention, forward + backward on (8, 256, 256) with 8 heads, tfcourse's
   MultiHeadAttention(attn_impl="sdpa") against torch.nn.MultiheadAttention (time ratio).
2. fused_throughput: training tokens/s of tfcourse.Transformer with attn_impl="sdpa" against
   torch.nn.Transformer of the same size (benchmarks/run.py's throughput_pair).
3. tiled: peak memory of tiled attention (blocks of 128) at n = 4,096 against chapter 01's
   attention (tfcourse.efficiency.PeakMemory: bytes of tensors, the same on every run).
4. local_memory: peak memory of local attention computed band by band
   (tfcourse.long_attention.local_attention, 128 keys each side) at n = 16,384 against
   chapter 01's exact attention, which holds the n x n scores and weights (2 GiB).
5. local_time: time of the same local attention against exact fused attention
   (F.scaled_dot_product_attention) at n = 16,384, forward pass.
"""

import statistics
import sys

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.efficiency import PeakMemory, tiled_attention, timings
from tfcourse.long_attention import local_attention
from tfcourse.multi_head import MultiHeadAttention

ROWS = ("fused", "fused_throughput", "tiled", "local_memory", "local_time")
LONG = 16_384  # positions of the local-attention rows
WINDOW = 128  # keys each side of a query


def fused_attention_pair(seed, batch=8, seq=256, d_model=256, heads=8, repeats=3):
    """Seconds of one forward + backward pass: tfcourse's fused MultiHeadAttention, then
    torch.nn.MultiheadAttention, on the same input; each the median of `repeats` calls after
    a warm-up, the two called in turn."""
    torch.manual_seed(seed)
    x = torch.randn(batch, seq, d_model, requires_grad=True)
    ours = MultiHeadAttention(d_model, heads, attn_impl="sdpa")
    theirs = nn.MultiheadAttention(d_model, heads, batch_first=True)
    times = timings({
        "tfcourse": lambda: ours(x, x, x)[0].sum().backward(),
        "torch.nn": lambda: theirs(x, x, x, need_weights=False)[0].sum().backward(),
    }, repeats=repeats)
    return statistics.median(times["tfcourse"]), statistics.median(times["torch.nn"])


def tiled_memory_pair(seed, n=4096, d=64, block_size=128):
    """Peak bytes of tensors of tiled attention, then of chapter 01's, forward pass, one head
    of n positions (the same on every seed: sizes, not timings)."""
    x = torch.randn(1, 1, n, d, generator=torch.Generator().manual_seed(seed))
    peaks = []
    with torch.no_grad():
        for fn in (lambda: tiled_attention(x, x, x, block_size=block_size),
                   lambda: scaled_dot_product_attention(x, x, x)):
            with PeakMemory() as memory:
                fn()
            peaks.append(memory.peak)
    return tuple(peaks)


def _one_head(seed, n, d=64):
    return torch.randn(1, 1, n, d, generator=torch.Generator().manual_seed(seed))


def local_memory_pair(seed, n=LONG, window=WINDOW):
    """Peak bytes of tensors of local attention (band by band), then of chapter 01's exact
    attention, forward pass, one head of n positions (the same on every seed)."""
    x = _one_head(seed, n)
    peaks = []
    with torch.no_grad():
        for fn in (lambda: local_attention(x, x, x, window),
                   lambda: scaled_dot_product_attention(x, x, x)):
            with PeakMemory() as memory:
                fn()
            peaks.append(memory.peak)
    return tuple(peaks)


def local_time_pair(seed, n=LONG, window=WINDOW, repeats=3):
    """Seconds of one forward pass: local attention (band by band), then exact fused attention
    (F.scaled_dot_product_attention), one head of n positions, called in turn."""
    x = _one_head(seed, n)
    with torch.no_grad():
        times = timings({"local": lambda: local_attention(x, x, x, window),
                         "fused": lambda: F.scaled_dot_product_attention(x, x, x)}, repeats=repeats)
    return statistics.median(times["local"]), statistics.median(times["fused"])


def main(argv=None):
    import run  # benchmarks/run.py, which lists these rows

    argv = sys.argv[1:] if argv is None else argv
    return run.main([arg for row in ROWS for arg in ("--only", row)] + argv)


if __name__ == "__main__":
    sys.exit(main())
