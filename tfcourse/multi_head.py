"""Chapter 02: multi-head attention.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                 (paper, section 3.2.2)

All h heads are computed at once: one d_model x d_model projection per role, whose output
is split into h slices of d_head = d_model / h features.
"""

from typing import NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse._validate import integer, probability, same_dtype
from tfcourse.attention import _check_inputs, scaled_dot_product_attention
from tfcourse.config import AttnImpl

# How attention is computed: "explicit" is chapter 01's function, written out (it returns the
# weights); "sdpa" is torch.nn.functional.scaled_dot_product_attention, fused (chapter 10).
ATTN_IMPLS = get_args(AttnImpl)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(batch, seq, d_model) -> (batch, heads, seq, d_head), d_head = d_model / heads."""
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch, seq, d_model), got {tuple(x.shape)}")
    batch, seq, d_model = x.shape
    n_heads = integer("n_heads", n_heads)
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, heads, seq, d_head) -> (batch, seq, heads * d_head), the inverse of split_heads."""
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, heads, seq, d_head), got {tuple(x.shape)}")
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


class KVCache:
    """One attention layer's projected keys and values, kept between calls for incremental
    decoding. Self-attention's cache grows: each call appends the keys and values of the new
    positions, so step t projects one token instead of all t. A `static` cache (cross-attention)
    is filled on the first call from the encoder's memory and reused as it is afterwards.

    key, value: (batch, heads, cached_len, d_head), or None before the first call.
    """

    def __init__(self, static: bool = False):
        self.static = static
        self.key = self.value = None

    def __len__(self):
        return 0 if self.key is None else self.key.size(2)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this call's keys and values; return all of them (what attention sees)."""
        if self.key is not None and not self.static:
            k, v = torch.cat((self.key, k), dim=2), torch.cat((self.value, v), dim=2)
        self.key, self.value = k, v
        return k, v

    def reorder(self, index):
        """Keep rows `index` of the batch (beam search: each new beam continues an old one)."""
        if self.key is not None:
            self.key, self.value = self.key.index_select(0, index), self.value.index_select(0, index)


class LayerCache(NamedTuple):
    """One layer's caches: its self-attention's, and its cross-attention's (None in a model
    without an encoder)."""

    self_attn: KVCache
    cross_attn: KVCache | None


class Cache:
    """What incremental decoding keeps between steps, for every layer of a decoder: the
    self-attention's keys and values of the positions so far (one more each step) and, in a
    decoder that reads an encoder (cross=True), the cross-attention's keys and values of the
    encoder's memory (computed once).

    len(cache) is the number of positions decoded so far: the position of the next token.
    """

    def __init__(self, n_layers: int, cross: bool = False):
        self.layers = [LayerCache(KVCache(), KVCache(static=True) if cross else None)
                       for _ in range(n_layers)]

    def __len__(self) -> int:
        return len(self.layers[0].self_attn) if self.layers else 0

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` of the batch: beam search continues beam index[i] in row i.
        The static memory caches are left alone: every beam of a sentence shares its memory."""
        for layer in self.layers:
            layer.self_attn.reorder(index)


class MultiHeadAttention(nn.Module):
    """Multi-head attention; self-attention when query, key and value are the same tensor,
    cross-attention when key and value come from elsewhere (the encoder's memory).

    Same computation as torch.nn.MultiheadAttention(d_model, n_heads, dropout, bias,
    batch_first=True), whose in_proj_weight is [W^Q; W^K; W^V] stacked, out_proj is W^O.

    attn_impl: "explicit" (chapter 01's scaled_dot_product_attention) or "sdpa" (PyTorch's
    fused F.scaled_dot_product_attention: the same result without storing the weights; a
    call with need_weights=True takes the explicit path, since the fused one never has them).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 attn_impl: str = "explicit"):
        super().__init__()
        d_model, n_heads = integer("d_model", d_model), integer("n_heads", n_heads)
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
        self.attn_impl = attn_impl
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(probability("dropout", dropout))  # on the weights, as torch

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, need_weights: bool = False,
                cache: "KVCache | None" = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (batch, q_len, d_model), key and value (batch, k_len, d_model); mask bool,
        True = may attend, broadcastable to (batch, heads, q_len, k_len).

        cache: None, or a KVCache for incremental decoding. Self-attention: key and value are
        the new positions only; the keys attended to are the cached ones and these, and the
        mask (if any) must cover them all. Cross-attention (a static cache): key and value
        are projected on the first call only.

        Returns output (batch, q_len, d_model) and, if need_weights, the attention weights
        (batch, heads, q_len, k_len) that made it (after dropout when training), else None.
        """
        self._check_inputs(query, key, value)
        q = split_heads(self.w_q(query), self.n_heads)  # (batch, heads, q_len, d_head)
        if cache is not None and cache.static and cache.key is not None:
            k, v = cache.key, cache.value  # the memory's, projected once
        else:
            k = split_heads(self.w_k(key), self.n_heads)  # (batch, heads, k_len, d_head)
            v = split_heads(self.w_v(value), self.n_heads)  # (batch, heads, k_len, d_head)
            if cache is not None:
                k, v = cache.update(k, v)  # (batch, heads, cached_len + k_len, d_head)
        if self.attn_impl == "sdpa" and not need_weights:
            _check_inputs(q, k, v, mask)
            dropout = self.dropout.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
            return self.w_o(merge_heads(out)), None  # (batch, q_len, d_model)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        if self.training and self.dropout.p > 0:
            weights = self.dropout(weights)  # (batch, heads, q_len, k_len)
            out = weights @ v  # (batch, heads, q_len, d_head)
        out = self.w_o(merge_heads(out))  # (batch, q_len, d_model)
        return out, (weights if need_weights else None)

    def _check_inputs(self, query, key, value):
        d_model = self.w_q.in_features
        for name, x in (("query", query), ("key", key), ("value", value)):
            same_dtype(name, x, self.w_q.weight)
            if x.dim() != 3 or x.size(-1) != d_model:
                raise ValueError(
                    f"{name} must have shape (batch, seq, d_model={d_model}), got {tuple(x.shape)}"
                )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                "key and value must have the same (batch, k_len), "
                f"got key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        if query.size(0) != key.size(0):
            raise ValueError(
                "query and key must have the same batch size, "
                f"got query {tuple(query.shape)} and key {tuple(key.shape)}"
            )
