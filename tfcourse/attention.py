"""Chapter 01: scaled dot-product attention.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V            (paper, eq. 1)
"""

import itertools
import math

import torch


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out step by step.

    Args:
        query: (..., q_len, d_k)
        key:   (..., k_len, d_k)
        value: (..., k_len, d_v)
        mask:  optional bool tensor broadcastable to (..., q_len, k_len); True means
               "may attend" (the convention of torch.nn.functional.scaled_dot_product_attention).

    Returns:
        output (..., q_len, d_v) and weights (..., q_len, k_len); each row of weights sums to 1.
        A query whose keys are all masked attends to nothing: its weights and output are 0.
    """
    _check_inputs(query, key, value, mask)
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., q_len, k_len)
    if mask is not None:
        # The most negative finite number acts as -inf after exp() without making NaN
        # (and NaN gradients) in rows where every key is masked.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights  # (..., q_len, d_v), (..., q_len, k_len)


def _check_inputs(query, key, value, mask):
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"{name} must have shape (..., seq_len, features), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if query.dtype != key.dtype or key.dtype != value.dtype:
        raise TypeError(
            "query, key and value must have one dtype, "
            f"got {query.dtype}, {key.dtype} and {value.dtype}"
        )
    if query.size(-1) == 0:
        raise ValueError(f"d_k must be at least 1 (it divides the scores by sqrt(d_k)), got "
                         f"query {tuple(query.shape)}")
    if query.size(-1) != key.size(-1):
        raise ValueError(
            "query and key must have the same last dimension d_k, "
            f"got query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            "key and value must have the same length k_len (dimension -2), "
            f"got key {tuple(key.shape)} and value {tuple(value.shape)}"
        )
    batch = _broadcast(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if batch is None:
        raise ValueError(
            "the leading (batch) dimensions of query, key and value do not broadcast: "
            f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {got}")
    scores_shape = (*batch, query.size(-2), key.size(-2))
    if _broadcast(mask.shape, scores_shape) != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"(..., q_len, k_len) = {scores_shape}"
        )


def _broadcast(*shapes):
    """The shape that `shapes` broadcast to, or None if they do not. (torch.broadcast_shapes
    does the same but costs more than the attention itself on small inputs.)"""
    result = []
    for sizes in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        other = {n for n in sizes if n != 1}
        if len(other) > 1:
            return None
        result.append(other.pop() if other else 1)
    return tuple(reversed(result))
