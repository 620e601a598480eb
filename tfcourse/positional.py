"""Chapter 03: positional encoding. Attention is blind to order; these add it.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))                (paper, section 3.5)
"""

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
