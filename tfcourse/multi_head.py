"""Chapter 02: multi-head attention.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                 (paper, section 3.2.2)

All h heads are computed at once: one d_model x d_model projection per role, whose output
is split into h slices of d_head = d_model / h features.
"""

from torch import nn

from tfcourse.attention import scaled_dot_product_attention


def split_heads(x, n_heads):
    """(batch, seq, d_model) -> (batch, heads, seq, d_head), d_head = d_model / heads."""
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch, seq, d_model), got {tuple(x.shape)}")
    batch, seq, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x):
    """(batch, heads, seq, d_head) -> (batch, seq, heads * d_head), the inverse of split_heads."""
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, heads, seq, d_head), got {tuple(x.shape)}")
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


class MultiHeadAttention(nn.Module):
    """Multi-head attention; self-attention when query, key and value are the same tensor,
    cross-attention when key and value come from elsewhere (the encoder's memory).

    Same computation as torch.nn.MultiheadAttention(d_model, n_heads, dropout, bias,
    batch_first=True), whose in_proj_weight is [W^Q; W^K; W^V] stacked, out_proj is W^O.
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
        self.dropout = nn.Dropout(dropout)  # on the attention weights, as torch does

    def forward(self, query, key, value, mask=None, need_weights=False):
        """query (batch, q_len, d_model), key and value (batch, k_len, d_model); mask bool,
        True = may attend, broadcastable to (batch, heads, q_len, k_len).

        Returns output (batch, q_len, d_model) and, if need_weights, the attention weights
        (batch, heads, q_len, k_len) that made it (after dropout when training), else None.
        """
        self._check_inputs(query, key, value)
        q = split_heads(self.w_q(query), self.n_heads)  # (batch, heads, q_len, d_head)
        k = split_heads(self.w_k(key), self.n_heads)  # (batch, heads, k_len, d_head)
        v = split_heads(self.w_v(value), self.n_heads)  # (batch, heads, k_len, d_head)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        if self.training and self.dropout.p > 0:
            weights = self.dropout(weights)  # (batch, heads, q_len, k_len)
            out = weights @ v  # (batch, heads, q_len, d_head)
        out = self.w_o(merge_heads(out))  # (batch, q_len, d_model)
        return out, (weights if need_weights else None)

    def _check_inputs(self, query, key, value):
        d_model = self.w_q.in_features
        for name, x in (("query", query), ("key", key), ("value", value)):
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
