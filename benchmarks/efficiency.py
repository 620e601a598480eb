"""Benchmarks of chapter 10: the fused attention path and tiled attention. They are rows of
benchmarks/run.py (its last block), measured as every row is: for each seed the two sides run
back to back, and the row reports the median of the per-seed ratios.

    python benchmarks/efficiency.py             # the three rows, about 2 minutes on a 2-core CPU
    python benchmarks/efficiency.py --quick     # one pair each, a rough look
    python benchmarks/run.py --only fused       # one of them (fused, fused_throughput, tiled)

1. fused: multi-head attention, forward + backward on (8, 256, 256) with 8 heads, tfcourse's
   MultiHeadAttention(attn_impl="sdpa") against torch.nn.MultiheadAttention (time ratio).
2. fused_throughput: training tokens/s of tfcourse.Transformer with attn_impl="sdpa" against
   torch.nn.Transformer of the same size (benchmarks/run.py's throughput_pair).
3. tiled: peak memory of tiled attention (blocks of 128) at n = 4,096 against chapter 01's
   attention (tfcourse.efficiency.PeakMemory: bytes of tensors, the same on every run).
"""

import statistics
import sys

import torch
from torch import nn

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.efficiency import PeakMemory, tiled_attention, timings
from tfcourse.multi_head import MultiHeadAttention

ROWS = ("fused", "fused_throughput", "tiled")


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


def main(argv=None):
    import run  # benchmarks/run.py, which lists these rows

    argv = sys.argv[1:] if argv is None else argv
    return run.main([arg for row in ROWS for arg in ("--only", row)] + argv)


if __name__ == "__main__":
    sys.exit(main())
