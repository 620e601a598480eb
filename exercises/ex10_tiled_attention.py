"""Exercise 10: tiled attention with an online softmax (the idea of FlashAttention), and the
sliding-window mask of local attention.

Fill in the functions below, then check it from the repository's root:

    pytest exercises/test_ex10_tiled_attention.py

or from a notebook:

    from tfcourse.checking import check
    check("ex10_tiled_attention")

The checks compare your function with chapter 01's attention on random inputs (3-D and
4-D, lengths that are not a multiple of the block size, masks that block whole blocks or
every key of a query, scores large enough to overflow e^s), on its gradients, and on the
memory it uses: it must never hold all q_len x k_len scores at once. The mask's checks try
windows of 0, 2 and wider than the sequence, with and without causal=True.
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401


def tiled_attention(query, key, value, mask=None, block_size=128):
    """softmax(Q K^T / sqrt(d_k)) V, computed over blocks of `block_size` keys.

    For each block B of keys, with S = Q K_B^T / sqrt(d_k) (q_len x |B| scores), keep per
    query a running maximum m, a running sum of exponentials l and a running weighted sum
    of the values o:

        m' = max(m, rowmax(S))
        l' = e^(m - m') l + rowsum(e^(S - m'))
        o' = e^(m - m') o + e^(S - m') V_B

    starting from m = -inf, l = 0, o = 0; after the last block the output is o / l.

    Args:
        query: (..., q_len, d_k)   e.g. (batch, q_len, d_k) or (batch, heads, q_len, d_k)
        key:   (..., k_len, d_k)
        value: (..., k_len, d_v)   d_v may differ from d_k
        mask:  None, or a bool tensor broadcastable to (..., q_len, k_len).
               True means "this query may attend to this key".
        block_size: keys per block; k_len need not be a multiple of it.

    Returns:
        output (..., q_len, d_v), equal to chapter 01's scaled_dot_product_attention(...)[0]
        (no weights: they are never all held). A query whose keys are ALL masked gets 0.

    Hints:
        1. Loop over the keys: for start in range(0, k_len, block_size). The last block
           may be shorter.
        2. Mask a block's scores (-inf) before anything else uses them.
        3. A query whose keys in this block (and all blocks before) are masked has
           m' = -inf, and -inf - (-inf) is NaN: subtract 0 instead there.
        4. Divide by l once, at the end (and not by 0 for a query that saw no key).
        5. A mask may have size 1 on the key axis, e.g. (..., q_len, 1): one flag per query,
           broadcast over every key. Sliced by block, such a mask is empty from the second
           block on: expand it to (..., q_len, k_len) first, then slice each block.
        6. Do not change the inputs in place, and do not call
           torch.nn.functional.scaled_dot_product_attention: write it yourself.
    """
    raise NotImplementedError


def sliding_window_mask(size, window, causal=False):
    """The mask of local (sliding-window) attention: (size, size) bool, True = may attend.

    Query i may attend key j when |i - j| <= window: the `window` keys on each side and its
    own position. With causal=True, also j <= i: itself and the `window` keys before it.

        sliding_window_mask(5, 1)               sliding_window_mask(5, 1, causal=True)
        1 1 0 0 0                               1 0 0 0 0
        1 1 1 0 0                               1 1 0 0 0
        0 1 1 1 0                               0 1 1 0 0
        0 0 1 1 1                               0 0 1 1 0
        0 0 0 1 1                               0 0 0 1 1

    Args:
        size: number of positions (queries = keys).
        window: keys on each side a query may see, an int >= 0 (it may exceed size).
        causal: if True, no key after the query.

    Returns:
        a (size, size) torch.bool tensor; rows are queries, columns keys.

    Hint: torch.arange(size) and broadcasting give every i - j at once.
    """
    raise NotImplementedError
