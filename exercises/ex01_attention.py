"""Exercise 01: scaled dot-product attention.

Fill in the function below, then check it from the repository's root:

    pytest exercises/test_ex01_attention.py

or from a notebook:

    from tfcourse.checking import check
    check("ex01_attention")

The checks run your function on random inputs of several shapes and compare it with the
reference. When your result matches a common mistake, the first line of the failure
names it and gives a hint (never the answer).
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401


def scaled_dot_product_attention(query, key, value, mask=None):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

    Args:
        query: (..., q_len, d_k)   e.g. (batch, q_len, d_k) or (batch, heads, q_len, d_k)
        key:   (..., k_len, d_k)
        value: (..., k_len, d_v)   d_v may differ from d_k
        mask:  None, or a bool tensor broadcastable to (..., q_len, k_len).
               True means "this query may attend to this key".

    Returns:
        (output, weights): output (..., q_len, d_v), weights (..., q_len, k_len).
        Each row of weights sums to 1 over the keys. A query whose keys are ALL masked
        attends to nothing: its row of weights is 0, and so is its output.

    Hints:
        1. Scores: multiply queries by keys. Which axes of `key` must you swap so that it
           works for 3-D and 4-D inputs alike?
        2. Scale the scores (notebook 01 shows why, and by how much).
        3. Masked scores must get no weight after the softmax. Which value does exp() turn
           into exactly 0?
        4. Softmax over the keys, then combine the values with the weights.
        5. Do not change the inputs in place, and do not call
           torch.nn.functional.scaled_dot_product_attention: write it yourself.
    """
    raise NotImplementedError
