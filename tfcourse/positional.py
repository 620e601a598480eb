"""Chapter 03: positional encoding. Attention is blind to order; these add it.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))                (paper, section 3.5)

Chapter 12: rotary position embedding (RoPE, Su et al. 2021), the positions of today's open
models. Nothing is added to the input: inside attention, the query and the key of position m
are rotated, each pair of features (a, b) by the angle m theta_i,

    (a, b) -> (a cos(m theta_i) - b sin(m theta_i),  a sin(m theta_i) + b cos(m theta_i))
    theta_i = base^(-2i / d_head),  i = 0 ... d_head / 2 - 1        (base 10000, as PE's)

so that q_m . k_n depends on the offset m - n only (a rotation by m, then back by n).
Which features form a pair is a convention: adjacent ones, (x_0, x_1), (x_2, x_3), ... (the
RoFormer paper, Meta's Llama code), or the two halves, (x_i, x_{i + d_head/2}) (GPT-NeoX,
Hugging Face transformers). They compute the same scores once the rows of W^Q and W^K are
permuted (halves_from_adjacent).
"""

from typing import Literal

import torch
from torch import nn

from tfcourse._validate import integer, probability


def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The paper's table of encodings, (max_len, d_model): even features sin, odd features cos."""
    max_len = integer("max_len", max_len)
    if integer("d_model", d_model) % 2 != 0:
        raise ValueError(f"d_model must be even (sin/cos pairs), got d_model={d_model}")
    # float64, so that even pos ~ 5000 gives the formula's values to float32 precision.
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = position * frequency  # (max_len, d_model / 2)
    pe = torch.stack((angle.sin(), angle.cos()), dim=-1)  # (max_len, d_model / 2, 2)
    return pe.flatten(1).to(torch.get_default_dtype())  # interleaved: sin, cos, sin, cos, ...


def _check_positions(x, start, d_model, max_len):
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(f"x must have shape (batch, seq, d_model={d_model}), got {tuple(x.shape)}")
    seq = x.size(1)
    if start < 0 or start + seq > max_len:
        raise ValueError(
            f"start={start} + seq={seq} = {start + seq} positions do not fit in max_len={max_len}"
        )


class PositionalEncoding(nn.Module):
    """x -> dropout(x + PE[start : start + seq]). `start` offsets the positions for
    incremental decoding, where one new token at position `start` arrives at a time.

    The table is a non-persistent buffer: it moves with .to(device) but stays out of the
    state_dict, since it is a fixed function of (max_len, d_model) and would only add
    max_len * d_model numbers to every checkpoint.
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(probability("dropout", dropout))
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        _check_positions(x, start, self.pe.size(1), self.pe.size(0))
        return self.dropout(x + self.pe[start : start + x.size(1)])  # (batch, seq, d_model)


class LearnedPositionalEncoding(nn.Module):
    """x -> dropout(x + E[start : start + seq]) with E a trained (max_len, d_model) table
    (the paper's alternative, "nearly identical results"; used by BERT and GPT)."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(probability("dropout", dropout))
        self.embedding = nn.Embedding(integer("max_len", max_len), integer("d_model", d_model))

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        _check_positions(x, start, self.embedding.embedding_dim, self.embedding.num_embeddings)
        positions = torch.arange(start, start + x.size(1), device=x.device)
        return self.dropout(x + self.embedding(positions))  # (batch, seq, d_model)


Pairs = Literal["halves", "adjacent"]


def rotary_cos_sin(positions: torch.Tensor, d_head: int, base: float = 10000.0,
                   dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos(m theta_i) and sin(m theta_i) for the positions m (seq,) and theta_i =
    base^(-2i / d_head): two (seq, d_head / 2) tables. The angles are computed in float64
    (m theta_i reaches thousands of radians, where a bfloat16 angle is off by several
    radians), then the tables are cast to ``dtype`` (default: torch's default dtype)."""
    if integer("d_head", d_head) % 2 != 0:
        raise ValueError(f"d_head must be even (the features are rotated in pairs), got {d_head}")
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64, device=positions.device)
                     / d_head)  # (d_head / 2,)
    angle = positions.to(torch.float64)[:, None] * theta  # (seq, d_head / 2)
    dtype = dtype or torch.get_default_dtype()
    return angle.cos().to(dtype), angle.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 pairs: Pairs = "halves") -> torch.Tensor:
    """x (..., seq, d_head) with each pair of features (a, b) rotated by its angle:
    (a cos - b sin, a sin + b cos); cos and sin (seq, d_head / 2) from rotary_cos_sin.
    pairs="halves": a = x[..., :d/2], b = x[..., d/2:] (transformers); "adjacent":
    a = x[..., 0::2], b = x[..., 1::2] (RoFormer, Meta)."""
    if x.size(-1) != 2 * cos.size(-1) or x.size(-2) != cos.size(-2):
        raise ValueError(f"x must have shape (..., seq={cos.size(-2)}, d_head={2 * cos.size(-1)}) "
                         f"to match cos and sin {tuple(cos.shape)}, got {tuple(x.shape)}")
    if pairs == "halves":
        a, b = x.chunk(2, dim=-1)  # (..., seq, d_head / 2) each
        # (a cos - b sin, b cos + a sin) as x cos + (-b, a) sin: whole-head products, faster
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (seq, d_head)
        return x * cos + torch.cat((-b, a), dim=-1) * sin
    if pairs == "adjacent":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    raise ValueError(f"pairs must be 'halves' or 'adjacent', got {pairs!r}")


def halves_from_adjacent(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The rows of W^Q or W^K (out_features = n_heads d_head, in_features) reordered so that
    rotating halves computes what rotating adjacent pairs computed with ``weight``: in each
    head, the features 0, 2, 4, ... first, then 1, 3, 5, ... (what transformers' conversion
    of Meta's Llama weights does). The scores q . k do not change."""
    out_features, in_features = weight.shape
    d_head = out_features // integer("n_heads", n_heads)
    return (weight.view(n_heads, d_head // 2, 2, in_features).transpose(1, 2)
            .reshape(out_features, in_features))


class RotaryEmbedding(nn.Module):
    """Rotates queries or keys (batch, heads, seq, d_head) at positions start, start + 1, ...
    (with a cache, start = the cached length). No parameters: the tables are a function of
    the positions only, so they are computed once for positions 0, 1, ... and kept (made
    again, twice as long, when a longer text comes; not in the state_dict), instead of at
    every call: generating one token at a time, computing them took a fifth of the time."""

    def __init__(self, d_head: int, base: float = 10000.0, pairs: Pairs = "halves"):
        super().__init__()
        self.d_head, self.base, self.pairs = integer("d_head", d_head), base, pairs
        self.tables: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin (n, d_head / 2)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        end = start + x.size(-2)
        cos = self.tables[0] if self.tables is not None else None
        if (cos is None or cos.size(0) < end or cos.dtype != x.dtype or cos.device != x.device
                or cos.is_inference() and not torch.is_inference_mode_enabled()):
            n = max(end, 2 * cos.size(0) if cos is not None else 0)
            self.tables = rotary_cos_sin(torch.arange(n, device=x.device), self.d_head,
                                         self.base, x.dtype)
        cos, sin = self.tables
        return apply_rotary(x, cos[start:end], sin[start:end], self.pairs)  # like x

    def extra_repr(self):
        return f"d_head={self.d_head}, base={self.base:g}, pairs={self.pairs!r}"
