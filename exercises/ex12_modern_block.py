"""Exercise 12: the parts that make chapter 09's GPT block into Llama's (Mistral 7B's adds a
sliding window, Qwen's biases on q, k and v, Gemma's GeGLU, a sqrt(d) embedding scale and
(1 + weight) gains): RMSNorm, the SwiGLU feed-forward network, rotary position embedding
(RoPE), and attention with rotary positions and a key/value cache.

Fill in the four items below, then check them from the repository's root:

    pytest exercises/test_ex12_modern_block.py               # all four
    pytest exercises/test_ex12_modern_block.py -k RMSNorm    # one, by its name here

or from a notebook:

    from tfcourse.checking import check
    check("ex12_modern_block")
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401
from torch import nn

from tfcourse.positional import RotaryEmbedding  # noqa: F401  (for rotary_attention)


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang & Sennrich 2019), Llama's norm:

        RMSNorm(x) = weight * x / sqrt(mean(x^2) + eps)      (mean over the last axis)

    __init__ is given; write forward.
    """

    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        """x (..., d_model) -> (..., d_model), in x's dtype (the weight in x's dtype, as a
        model cast to float16 has it). Normalize, cast back to x's dtype, then multiply by
        the weight, as Llama's RMSNorm does (with a float32 weight on a float16 x that gives
        float32, by type promotion; torch.nn.RMSNorm gives x's dtype: the checks use a weight
        in x's dtype, where the two agree).

        Hints:
            1. What does LayerNorm do that this formula does not?
            2. eps goes where torch.nn.LayerNorm puts it.
            3. keepdim=True keeps the last axis, so that the division lines up with x.
            4. In float16, squares overflow past 65504: compute in float32 at least, then
               return x's dtype.
            5. Write it yourself: no torch.nn.RMSNorm or F.rms_norm.
        """
        raise NotImplementedError


class SwiGLU(nn.Module):
    """The gated feed-forward network of Llama's block (Shazeer 2020):

        SwiGLU(x) = (SiLU(x W_gate) * x W_up) W_down        SiLU: self.activation

    with gate, up and down the layers below and dropout on the d_ff-wide product.

    SiLU(z) = z * sigmoid(z). No biases. __init__ is given; write forward.
    """

    def __init__(self, d_model, d_ff, dropout=0.0, activation="silu"):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.activation = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}[activation]

    def forward(self, x):
        """x (..., d_model) -> (..., d_model).

        Hints:
            1. Which of the two d_ff-wide projections goes through the activation?
            2. Two branches meet in an elementwise product.
        """
        raise NotImplementedError


def rotate(x, start=0, base=10000.0, pairs="halves"):
    """Rotary position embedding (Su et al. 2021): each pair of features (a, b) of the vector
    at position m is turned by the angle m * theta_i,

        (a, b) -> (a cos(m theta_i) - b sin(m theta_i),  a sin(m theta_i) + b cos(m theta_i))
        theta_i = base ** (-2i / d_head),   i = 0, 1, ..., d_head/2 - 1

    Args:
        x: (..., seq, d_head) queries or keys, d_head even; x[..., t, :] is at position
           m = start + t (with a cache, start is the number of cached positions)
        start: the position of x[..., 0, :]
        base: the base of the frequencies (Llama 2: 10000, Llama 3: 500000)
        pairs: "halves": pair i is (x[..., i], x[..., i + d_head/2]) (transformers);
               "adjacent": pair i is (x[..., 2i], x[..., 2i + 1]) (RoFormer, Meta)

    Returns:
        a tensor like x (same shape and dtype). Compute the angles in float32 at least
        (float64 for a float64 x) whatever x's dtype, then cast cos and sin to x's dtype.

    Hints:
        1. Build theta (d_head/2,), the positions (seq,), and their outer product: the
           angles (seq, d_head/2).
        2. Split x into the a's and the b's of its pairs, rotate, and put them back where
           they were.
    """
    raise NotImplementedError


def rotary_attention(q, k, v, past_k=None, past_v=None, base=10000.0):
    """Causal self-attention of new positions, with rotary positions and a key/value cache.

    Args:
        q, k, v: (batch, heads, seq, d_head), the projections of the seq NEW tokens, not
            rotated yet. They are at positions start, ..., start + seq - 1, where start is
            the number of cached positions (0 without a cache).
        past_k, past_v: None, or (batch, heads, start, d_head): the keys (already rotated at
            their positions) and values of the earlier tokens.
        base: RoPE's base.

    Returns:
        (batch, heads, seq, d_head): softmax(Q K^T / sqrt(d_head)) V over the cached and the
        new keys, new token t reading the keys up to its own position start + t.

    Use tfcourse's RotaryEmbedding(d_head, base)(x, start) to rotate (imported above), so
    that this check judges the attention alone. (F.scaled_dot_product_attention's
    is_causal=True aligns its mask to the top left: with a cache, build the mask yourself.)

    Hints:
        1. Which of q, k and v carry positions?
        2. At which position is the first new token?
        3. The mask has shape (seq, start + seq); which keys may new token t read?
    """
    raise NotImplementedError
