"""Chapter 10: grouped-query attention, the way to shrink the key/value cache.

Decoding keeps every layer's keys and values of every past token (multi_head.KVCache): per
token, 2 x layers x heads x d_head numbers. Grouped-query attention (GQA, Ainslie et al.
2023) lets groups of n_heads / n_kv_heads query heads share one key/value head:

    head_i = Attention(Q W_i^Q, K W_g^K, V W_g^V),   g = i // (n_heads / n_kv_heads)

n_kv_heads = n_heads is multi-head attention (the paper's), n_kv_heads = 1 multi-query
attention (Shazeer 2019). The cache shrinks by n_heads / n_kv_heads; the queries keep all
their heads.

Chapter 12: Llama's attention is this one, without biases and with rotary positions (a
RotaryEmbedding rotates the new queries and keys, at positions offset by the cache's length,
before the keys are cached).
"""

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse._validate import integer
from tfcourse.attention import scaled_dot_product_attention
from tfcourse.multi_head import ATTN_IMPLS, KVCache, MultiHeadAttention, merge_heads, split_heads
from tfcourse.positional import RotaryEmbedding


def kv_cache_bytes_per_token(n_layers: int, n_kv_heads: int, d_head: int,
                             bytes_per_number: int = 2) -> int:
    """Bytes of keys and values that decoding keeps per token: 2 x layers x kv heads x d_head
    numbers (2 bytes each in bfloat16 or float16, 4 in float32)."""
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_number


class GroupedQueryAttention(nn.Module):
    """Attention with n_heads query heads and n_kv_heads key/value heads (module docstring).
    With n_kv_heads = n_heads and the same weights it computes what
    tfcourse.multi_head.MultiHeadAttention (attn_impl="explicit") computes.

    W^Q: d_model x (n_heads d_head), W^K, W^V: d_model x (n_kv_heads d_head), W^O: (n_heads
    d_head) x d_model: n_heads / n_kv_heads times fewer keys and values to project and to
    cache. d_head: each head's width, d_model / n_heads unless given (Gemma's heads are 256
    wide whatever d_model / n_heads; transformers' LlamaConfig calls it head_dim).
    rotary: a RotaryEmbedding for the queries and keys (chapter 12), or None. attn_impl:
    "explicit" (chapter 01's) or "sdpa" (torch's fused kernel), as MultiHeadAttention's.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = True,
                 rotary: RotaryEmbedding | None = None, attn_impl: str = "explicit",
                 d_head: int | None = None):
        super().__init__()
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
        d_model, n_heads = integer("d_model", d_model), integer("n_heads", n_heads)
        n_kv_heads = integer("n_kv_heads", n_kv_heads)
        if d_head is None and d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head = d_model // n_heads if d_head is None else integer("d_head", d_head)
        self.w_q = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_head, d_model, bias=bias)
        self.rotary, self.attn_impl = rotary, attn_impl

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """query (batch, q_len, d_model), key and value (batch, k_len, d_model); mask bool,
        True = may attend, broadcastable to (batch, heads, q_len, k_len). cache: a KVCache
        (self-attention: key and value are the new positions); it keeps n_kv_heads heads,
        keys already rotated. Returns (batch, q_len, d_model)."""
        MultiHeadAttention._check_inputs(self, query, key, value)  # the same shapes and dtypes
        q = split_heads(self.w_q(query), self.n_heads)  # (batch, heads, q_len, d_head)
        k = split_heads(self.w_k(key), self.n_kv_heads)  # (batch, kv_heads, k_len, d_head)
        v = split_heads(self.w_v(value), self.n_kv_heads)  # (batch, kv_heads, k_len, d_head)
        if self.rotary is not None:  # the new positions follow the cached ones; not v
            start = len(cache) if cache is not None else 0
            q, k = self.rotary(q, start), self.rotary(k, start)
        if cache is not None:
            k, v = cache.update(k, v)  # (batch, kv_heads, cached_len + k_len, d_head)
        group = self.n_heads // self.n_kv_heads
        if self.attn_impl == "sdpa":  # the fused kernel shares the key/value heads, uncopied
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=group > 1)
        else:
            k = k.repeat_interleave(group, dim=1)  # (batch, heads, k_len, d_head), per group
            v = v.repeat_interleave(group, dim=1)
            out, _ = scaled_dot_product_attention(q, k, v, mask)  # (batch, heads, q_len, d_head)
        return self.w_o(merge_heads(out))  # (batch, q_len, d_model)
