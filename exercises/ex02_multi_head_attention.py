"""Exercise 02: multi-head attention.

Fill in `split_heads`, `merge_heads` and `MultiHeadAttention.forward`, then check them from
the repository's root:

    pytest exercises/test_ex02_multi_head_attention.py

or from a notebook:

    from tfcourse.checking import check
    check("ex02_multi_head_attention")

`__init__` is written for you: the checks copy the reference's weights into your module by
parameter name (w_q, w_k, w_v, w_o), so keep those names. When your result matches a common
mistake, the first line of the failure names it and gives a hint (never the answer).
"""

import math  # noqa: F401  (you may need these)

import torch  # noqa: F401
from torch import nn

from tfcourse import attention  # noqa: F401  (exercise 01's reference: attention.scaled_dot_product_attention)


def split_heads(x, n_heads):
    """(batch, seq, d_model) -> (batch, heads, seq, d_head), with d_head = d_model / n_heads.

    Head i gets the features i * d_head ... (i + 1) * d_head - 1 of every position:
    split_heads(x, n_heads)[:, i] == x[:, :, i * d_head : (i + 1) * d_head].

    Hints:
        1. First cut the last axis in two: (batch, seq, heads, d_head). `view` (or `reshape`)
           does that without moving any number.
        2. Then bring the heads axis in front of the positions. Could a single `view` to
           (batch, heads, seq, d_head) do both steps? Try it on torch.arange(12).view(1, 3, 4)
           with 2 heads and look at which positions end up in head 0.
    """
    raise NotImplementedError


def merge_heads(x):
    """(batch, heads, seq, d_head) -> (batch, seq, heads * d_head), the inverse of split_heads.

    Concat(head_1, ..., head_h): each position's features are its head 0 features, then its
    head 1 features, and so on. merge_heads(split_heads(x, n)) == x.

    Hints:
        1. Undo the steps of split_heads in reverse order.
        2. After a transpose the numbers are no longer laid out in memory in the new order, so
           `view` may refuse: use `reshape` (or `.contiguous().view(...)`).
    """
    raise NotImplementedError


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                  (paper, section 3.2.2)

    All heads at once: one d_model x d_model projection per role (w_q, w_k, w_v), whose output
    is split into n_heads slices of d_head = d_model / n_heads features.
    """

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)  # on the attention weights (the checks use 0)

    def forward(self, query, key, value, mask=None, need_weights=False):
        """Multi-head attention of `query` over `key` and `value`.

        Args:
            query: (batch, q_len, d_model)
            key:   (batch, k_len, d_model)   self-attention: query, key and value are the
            value: (batch, k_len, d_model)   same tensor; cross-attention: k_len may differ
            mask:  None, or a bool tensor broadcastable to (batch, heads, q_len, k_len),
                   True = may attend, e.g. (batch, 1, 1, k_len) for padding or
                   (q_len, k_len) for a causal mask. The same mask serves every head.
            need_weights: also return the attention weights.

        Returns:
            (output, weights): output (batch, q_len, d_model); weights
            (batch, heads, q_len, k_len) when need_weights, else None.

        Hints:
            1. Project query, key and value with w_q, w_k, w_v, then split each into heads.
            2. Attend within each head: attention.scaled_dot_product_attention (imported
               above) works on (batch, heads, seq, d_head) tensors. Which width does each
               head's scale use?
            3. The same mask must apply to every head: compare its shape with the scores'
               (batch, heads, q_len, k_len) before you change it.
            4. Merge the heads, then mix them with the output projection w_o.
            5. Dropout on the weights is optional and not checked: the checks build this
               module with dropout=0, so a forward without it passes. To add it as the
               reference and torch.nn.MultiheadAttention do: in training, apply self.dropout
               to the weights, then recompute weights @ v; need_weights then returns those
               dropped-out weights (the ones that made the output).
        """
        raise NotImplementedError
